"""What a trial is worth: the objective, a trial's measurement, and the verdict of a candidate
against the incumbent (the best settings so far), told from noise with the A/B noise band."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pyinfra_sglang.served_benchmark.noise_band import compare


@dataclass(frozen=True)
class Objective:
    """Output throughput at one concurrency, the higher the better; optionally only where the
    median TPOT and TTFT at that concurrency stay under limits (a latency target)."""

    concurrency: int
    max_tpot_ms: float | None = None
    max_ttft_ms: float | None = None

    def describe(self) -> str:
        limits = [
            f"median {name} <= {value:g} ms"
            for name, value in (("TPOT", self.max_tpot_ms), ("TTFT", self.max_ttft_ms))
            if value is not None
        ]
        text = f"output tok/s at concurrency {self.concurrency}"
        return text + (f" with {' and '.join(limits)}" if limits else "")

    def as_dict(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "max_tpot_ms": self.max_tpot_ms,
            "max_ttft_ms": self.max_ttft_ms,
        }


@dataclass(frozen=True)
class Measurement:
    """A trial's benchmark, its rounds pooled: every run's output tok/s per concurrency, and
    the median over runs of bench_serving's median TPOT and TTFT."""

    runs: dict[int, list[float]]
    tpot_ms: dict[int, float]
    ttft_ms: dict[int, float]

    @staticmethod
    def from_lines(lines: list[dict]) -> Measurement:
        """From bench_serving's result lines (bench.jsonl of one or more rounds)."""
        runs: dict[int, list[float]] = {}
        tpot: dict[int, list[float]] = {}
        ttft: dict[int, list[float]] = {}
        for line in lines:
            c = line.get("max_concurrency")
            if c is None or line.get("output_throughput") is None:
                continue
            runs.setdefault(int(c), []).append(float(line["output_throughput"]))
            for key, into in (("median_tpot_ms", tpot), ("median_ttft_ms", ttft)):
                if line.get(key) is not None:
                    into.setdefault(int(c), []).append(float(line[key]))
        return Measurement(
            runs,
            {c: statistics.median(v) for c, v in tpot.items()},
            {c: statistics.median(v) for c, v in ttft.items()},
        )

    def over_limits(self, objective: Objective) -> list[str]:
        """The objective's latency limits this measurement breaks (or cannot show it keeps)."""
        c, broken = objective.concurrency, []
        for name, limit, values in (
            ("TPOT", objective.max_tpot_ms, self.tpot_ms),
            ("TTFT", objective.max_ttft_ms, self.ttft_ms),
        ):
            if limit is None:
                continue
            if c not in values:
                broken.append(f"no median {name} at concurrency {c}")
            elif values[c] > limit:
                broken.append(f"median {name} {values[c]:.1f} ms > {limit:g} ms")
        return broken


# Verdicts of a candidate against the incumbent.
BETTER, WORSE, TIE, CLOSE = "better", "worse", "tie", "close"
FAILED, OVER_LIMIT, UNMEASURED = "failed to start", "over the latency limit", "not measured"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    difference_pct: float | None = None  # candidate against incumbent, objective throughput
    spread_pct: float | None = None  # the larger side's ± half range
    why: str = ""


def judge(incumbent: Measurement, candidate: Measurement, objective: Objective) -> Verdict:
    """``better``/``worse`` when the difference at the objective's concurrency is larger than
    the larger side's run-to-run spread; within it ``close`` when the candidate is ahead (worth
    another round) and ``tie`` when it is not. A candidate over a latency limit loses unless the
    incumbent is over one too."""
    c = objective.concurrency
    if c not in candidate.runs:
        return Verdict(UNMEASURED, why=f"the benchmark gave no result at concurrency {c}")
    broken = candidate.over_limits(objective)
    incumbent_broken = incumbent.over_limits(objective)
    if broken and not incumbent_broken:
        return Verdict(OVER_LIMIT, why="; ".join(broken))
    if incumbent_broken and not broken:
        return Verdict(BETTER, why="keeps the latency limits the incumbent broke")
    [comparison] = compare({c: incumbent.runs[c]}, {c: candidate.runs[c]})
    spread = max(comparison.spread_a_pct, comparison.spread_b_pct)
    difference = comparison.difference_pct
    if comparison.verdict == "real":
        verdict = BETTER if difference > 0 else WORSE
    elif comparison.verdict == "noise":
        verdict = CLOSE if difference > 0 else TIE
    else:  # one run a side: no spread to judge by; another round
        verdict = CLOSE
    return Verdict(verdict, difference, spread, comparison.verdict)
