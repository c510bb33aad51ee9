"""The noise band: is a throughput difference between two sets of runs real, or noise?

A side's spread is its runs' half range relative to their mean (the "±6%" of 94..106 around
100). The difference is "noise" when it is no larger than the larger spread, "real" when it is,
and "not enough runs to tell" with fewer than two runs on a side: one run shows no spread.
Standard library only: the tuner uses it beside a real server on a machine without the
project's dependencies.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

MIN_RUNS = 2


def spread_pct(values: list[float]) -> float:
    """± half the range, in percent of the mean (0 for a single run)."""
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / 2 / mean * 100 if mean else 0.0


@dataclass(frozen=True)
class Comparison:
    concurrency: int
    runs_a: int
    runs_b: int
    mean_a: float  # output tok/s
    mean_b: float
    difference_pct: float  # B against A
    spread_a_pct: float
    spread_b_pct: float
    verdict: str  # "noise", "real", "not enough runs to tell"


def compare(side_a: dict[int, list[float]], side_b: dict[int, list[float]]) -> list[Comparison]:
    """One comparison per concurrency both sides measured."""
    comparisons = []
    for concurrency in sorted(side_a.keys() & side_b.keys()):
        runs_a, runs_b = side_a[concurrency], side_b[concurrency]
        mean_a, mean_b = statistics.fmean(runs_a), statistics.fmean(runs_b)
        if mean_a:
            difference = (mean_b - mean_a) / mean_a * 100
        else:  # from nothing: no difference when B made nothing either, else no percentage
            difference = 0.0 if not mean_b else float("inf")
        spread_a, spread_b = spread_pct(runs_a), spread_pct(runs_b)
        if min(len(runs_a), len(runs_b)) < MIN_RUNS:
            verdict = "not enough runs to tell"
        else:
            verdict = "noise" if abs(difference) <= max(spread_a, spread_b) else "real"
        comparisons.append(
            Comparison(
                concurrency,
                len(runs_a),
                len(runs_b),
                mean_a,
                mean_b,
                difference,
                spread_a,
                spread_b,
                verdict,
            )
        )
    return comparisons
