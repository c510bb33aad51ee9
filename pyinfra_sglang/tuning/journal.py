"""The search's journal: one JSON line per finished round, appended as it finishes, so a
search killed at any point resumes from it. Its first line says which search it is (start
settings, space, objective): a journal is resumed only by the same search."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

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


def open_journal(folder: Path, space: Space, start: dict, objective: Objective) -> list[Round]:
    """The rounds recorded in ``folder``'s journal, after checking it is this search's; a new
    journal (with its header) where there is none."""
    path = folder / JOURNAL_FILE
    expected = header(space, start, objective)
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(expected, sort_keys=True) + "\n")
        return []
    try:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as error:
        raise JournalError(f"{path}: cannot be read: {error}") from None
    if not lines or lines[0] != json.loads(json.dumps(expected)):
        raise JournalError(
            f"{path} records another search (other start settings, space or objective); "
            "resume it with the same settings, or tune into a new folder"
        )
    rounds = []
    for number, line in enumerate(lines[1:], 2):
        try:
            rounds.append(
                Round(
                    trial=int(line["trial"]),
                    round=int(line["round"]),
                    settings=dict(line["settings"]),
                    status=str(line["status"]),
                    lines=list(line["lines"]),
                    seconds=float(line["seconds"]),
                    diagnosis=line.get("diagnosis"),
                    error=line.get("error"),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise JournalError(f"{path}: line {number} is not a round: {error}") from None
    return rounds


def append_round(folder: Path, r: Round) -> None:
    """Record a finished round (one line, flushed before the next trial starts)."""
    with open(folder / JOURNAL_FILE, "a") as journal:
        journal.write(json.dumps(round_line(r), sort_keys=True) + "\n")


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
