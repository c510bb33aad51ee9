"""Regressions: a run's output throughput per concurrency against an earlier run's."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def throughputs_by_concurrency(lines: list[dict]) -> dict[int, list[float]]:
    """Every ``output_throughput`` (tok/s) per ``max_concurrency`` of bench_serving lines (a
    run with repeats holds several lines per concurrency)."""
    found: dict[int, list[float]] = {}
    for line in lines:
        if line.get("max_concurrency") is not None and line.get("output_throughput") is not None:
            found.setdefault(int(line["max_concurrency"]), []).append(
                float(line["output_throughput"])
            )
    return found


def throughput_by_concurrency(lines: list[dict]) -> dict[int, float]:
    """Mean ``output_throughput`` per ``max_concurrency``."""
    return {c: statistics.fmean(v) for c, v in sorted(throughputs_by_concurrency(lines).items())}


@dataclass(frozen=True)
class Regression:
    concurrency: int
    before: float  # tok/s
    after: float
    threshold_pct: float

    @property
    def drop_pct(self) -> float:
        return (self.before - self.after) / self.before * 100

    def message(self) -> str:
        return (
            f"concurrency {self.concurrency}: output throughput {self.before:.1f} -> "
            f"{self.after:.1f} tok/s (-{self.drop_pct:.1f}%), beyond the "
            f"{self.threshold_pct:g}% threshold"
        )


def regressions(
    before: dict[int, float], after: dict[int, float], threshold_pct: float
) -> list[Regression]:
    """Concurrencies measured in both runs whose throughput dropped by more than
    ``threshold_pct`` percent."""
    found = []
    for concurrency in sorted(before.keys() & after.keys()):
        was, now = before[concurrency], after[concurrency]
        if was > 0 and (was - now) / was * 100 > threshold_pct:
            found.append(Regression(concurrency, was, now, threshold_pct))
    return found
