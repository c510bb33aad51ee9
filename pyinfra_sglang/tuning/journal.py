"""The search's journal: one JSON line per finished round, appended as it finishes, so a
search killed at any point resumes from it. Its first line says which search it is (start
settings, space, objective): a journal is resumed only by the same search."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from pyinfra_sglang.safe_write import OutputFolder
from pyinfra_sglang.served_benchmark.limits import (
    OverCapError,
    check_count,
    check_depth,
    limits,
    loads,
    over_cap,
)
from pyinfra_sglang.tuning.judge import Objective
from pyinfra_sglang.tuning.search import Round
from pyinfra_sglang.tuning.space import Space

JOURNAL_FILE = "tune.jsonl"
# What a round keeps of each bench_serving line: what the judgement and the table read.
KEPT = ("max_concurrency", "output_throughput", "median_tpot_ms", "median_ttft_ms", "p99_tpot_ms")


class JournalError(ValueError):
    """A journal that cannot be read, or belongs to another search."""


def header(space: Space, start: dict[str, Any], objective: Objective) -> dict:
    return {
        "kind": "search",
        "start": start,
        "space": space.digest(),
        "objective": objective.as_dict(),
    }


def round_line(r: Round) -> dict:
    return {
        "kind": "round",
        "trial": r.trial,
        "round": r.round,
        "settings": r.settings,
        "status": r.status,
        "lines": [{k: line[k] for k in KEPT if k in line} for line in r.lines],
        "seconds": round(r.seconds, 1),
        "diagnosis": r.diagnosis,
        "error": r.error,
    }


STATUSES = ("ok", "failed")


def _count(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what} is {value!r}, not a whole number >= {low}")
    return value


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is {value!r}, not a number")
    if not math.isfinite(value) or value < 0 or value > limits().max_number:
        raise ValueError(f"{what} is {value!r}, not a finite number from 0 to the cap")
    return float(value)


def _result(line: Any, number: int) -> dict:
    """One kept bench_serving line: its numbers finite and not negative."""
    if not isinstance(line, dict) or set(line) - set(KEPT):
        raise ValueError(f"result {number} is not a result line (keys: {', '.join(KEPT)})")
    checked: dict = {}
    for key, value in line.items():
        if key == "max_concurrency":
            checked[key] = _count(value, f"result {number}'s {key}", 1)
        else:
            checked[key] = _finite(value, f"result {number}'s {key}")
    return checked


def _text(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what} is {value!r}, not text")
    return value


def round_of(line: Any) -> Round:
    """A journal line as a Round, every value checked; ValueError naming the first bad one."""
    if not isinstance(line, dict) or line.get("kind") != "round":
        raise ValueError("not a round line")
    if not isinstance(line.get("settings"), dict):
        raise ValueError(f"settings is {line.get('settings')!r}, not a table")
    if line.get("status") not in STATUSES:
        raise ValueError(f"status is {line.get('status')!r}; allowed: {', '.join(STATUSES)}")
    results = line.get("lines")
    if not isinstance(results, list):
        raise ValueError(f"lines is {results!r}, not a list")
    return Round(
        trial=_count(line.get("trial"), "trial"),
        round=_count(line.get("round"), "round", 1),
        settings=dict(line["settings"]),
        status=line["status"],
        lines=[_result(result, n) for n, result in enumerate(results, 1)],
        seconds=_finite(line.get("seconds", 0.0), "seconds"),
        diagnosis=_text(line.get("diagnosis"), "diagnosis"),
        error=_text(line.get("error"), "error"),
    )


def _read(folder: Path) -> list | None:
    """The journal's JSON lines (None when there is none): read without following a link,
    within the byte, nesting and round caps (data/diagnosis.toml [limits])."""
    path = folder / JOURNAL_FILE
    if not folder.is_dir():
        return None
    try:
        with OutputFolder(folder) as out:
            # The search is resumed from these numbers: only the user's own journal, in a
            # folder no one else may write, is trusted (a planted one is refused).
            raw = out.read(JOURNAL_FILE, private=True)
            if raw is not None:
                out.check_private()
    except OSError as error:
        raise JournalError(f"{path}: cannot be read: {error}") from None
    if raw is None:
        return None
    cap = limits().max_journal_bytes
    if len(raw) > cap:
        raise JournalError(str(over_cap(path, f"{len(raw)} bytes", "max_journal_bytes")))
    rows = [row for row in raw.splitlines() if row.strip()]
    try:
        check_count(path, len(rows) - 1, "rounds", "max_journal_rounds")
        check_depth(path, raw)
        return [loads(path, row.decode()) for row in rows]
    except (OverCapError, ValueError) as error:
        raise JournalError(f"{path}: cannot be read: {error}") from None


def open_journal(folder: Path, space: Space, start: dict, objective: Objective) -> list[Round]:
    """The rounds recorded in ``folder``'s journal, after checking it is this search's and
    every value in it; a new journal (with its header) where there is none. A journal is
    written and read only as a plain file in a folder that is not a link (safe_write)."""
    path = folder / JOURNAL_FILE
    expected = header(space, start, objective)
    lines = _read(folder)
    if lines is None:
        try:
            with OutputFolder(folder, mode=0o700) as out:
                out.write(JOURNAL_FILE, json.dumps(expected, sort_keys=True) + "\n", 0o600)
        except OSError as error:
            raise JournalError(f"{path}: cannot be written: {error}") from None
        return []
    if not lines or lines[0] != json.loads(json.dumps(expected)):
        raise JournalError(
            f"{path} records another search (other start settings, space or objective); "
            "resume it with the same settings, or tune into a new folder"
        )
    rounds = []
    for number, line in enumerate(lines[1:], 2):
        try:
            rounds.append(round_of(line))
        except ValueError as error:
            raise JournalError(f"{path}: line {number} is not a round: {error}") from None
    return rounds


def append_round(folder: Path, r: Round) -> None:
    """Record a finished round (the journal written anew by rename before the next trial
    starts, never through a link, within its byte cap)."""
    line = json.dumps(round_line(r), sort_keys=True, allow_nan=False) + "\n"
    try:
        with OutputFolder(folder) as out:
            out.append(JOURNAL_FILE, line, limit=limits().max_journal_bytes, private=True)
    except OSError as error:
        raise JournalError(f"{folder / JOURNAL_FILE}: cannot be written: {error}") from None


def trial_estimate_s(rounds: list[Round], bound_s: float) -> float:
    """What the next trial round should take: the median of those measured, the bound (start
    timeout plus the benchmark's) before any."""
    measured = [r.seconds for r in rounds if r.seconds > 0]
    return statistics.median(measured) if measured else bound_s


def budget_problem(budget_s: float, elapsed_s: float, estimate_s: float, bound_s: float) -> str:
    """Why no further round starts ("" when one fits): the whole search is bounded."""
    if bound_s > budget_s:
        return (
            f"one trial can take up to {bound_s:.0f} s (start timeout plus benchmark), more than "
            f"the budget of {budget_s:.0f} s"
        )
    if elapsed_s + estimate_s > budget_s:
        return (
            f"the time budget ({budget_s:.0f} s) is spent: {elapsed_s:.0f} s used, a trial "
            f"takes ~{estimate_s:.0f} s"
        )
    return ""
