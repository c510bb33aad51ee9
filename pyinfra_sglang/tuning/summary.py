"""What a search prints: progress lines, the table of every trial, and the winner as a ready
``sglang_profile_overrides`` block."""

from __future__ import annotations

import statistics
from typing import Any

from pyinfra_sglang.served_benchmark.noise_band import spread_pct
from pyinfra_sglang.tuning.search import State, Trial, winning_overrides


def _value(value: Any) -> str:
    return repr(value) if not isinstance(value, bool) else str(value)


def change_text(trial: Trial) -> str:
    if not trial.change:
        return "starting settings"
    return ", ".join(f"{k} = {_value(v)}" for k, v in trial.change.items())


def throughput_cells(trial: Trial, concurrencies: list[int]) -> list[str]:
    cells = []
    for c in concurrencies:
        runs = trial.measurement.runs.get(c) if trial.measurement else None
        if not runs:
            cells.append("-")
            continue
        cells.append(f"{statistics.fmean(runs):.1f} ±{spread_pct(runs):.1f}% ({len(runs)})")
    return cells


def concurrencies_of(trials: list[Trial]) -> list[int]:
    return sorted({c for t in trials if t.measurement for c in t.measurement.runs})


def verdict_text(trial: Trial) -> str:
    v = trial.verdict
    if v.difference_pct is None:
        return v.verdict + (f": {v.why}" if v.why and v.verdict != "baseline" else "")
    return f"{v.verdict} ({v.difference_pct:+.1f}% vs ±{v.spread_pct:.1f}%)"


def trial_table(trials: list[Trial]) -> str:
    """Every trial: what changed, rounds, mean output tok/s ± spread (runs) per concurrency,
    the verdict against the incumbent of its time, and the diagnosis."""
    concurrencies = concurrencies_of(trials)
    header = ["#", "change", "rounds", *[f"c={c} tok/s" for c in concurrencies], "verdict"]
    rows = [
        [
            str(t.trial),
            change_text(t),
            str(t.rounds),
            *throughput_cells(t, concurrencies),
            verdict_text(t),
        ]
        for t in trials
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]
    ]
    diagnosed = [f"  #{t.trial}: {t.diagnosis}" for t in trials if t.diagnosis]
    if diagnosed:
        lines += ["", "Diagnosis per trial:", *diagnosed]
    return "\n".join(lines) + "\n"


def overrides_block(existing: dict[str, Any], start: dict[str, Any], state: State) -> str:
    """The inventory line that serves the winner: the host's own overrides with what the
    search changed laid over them (Python, as an inventory file holds it)."""
    merged = {**existing, **winning_overrides(start, state.incumbent)}
    body = ", ".join(f"{k!r}: {v!r}" for k, v in sorted(merged.items()))
    return f"sglang_profile_overrides = {{{body}}}"


def progress_line(state: State, elapsed_s: float, estimate_s: float) -> str:
    """Before a round: which trial, what it tries, and when the search should end."""
    step = state.next
    if step is None:
        return "search finished"
    round_text = f" round {step.round}" if step.round > 1 else ""
    eta = state.remaining * estimate_s
    return (
        f"trial {step.trial}{round_text}: {step.reason}; at most {state.remaining} trials left, "
        f"~{estimate_s:.0f} s each: done in ~{eta / 60:.0f} min ({elapsed_s / 60:.0f} min so far)"
    )
