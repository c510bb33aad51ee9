"""A/B: is a throughput difference between two sets of benchmark runs real, or noise?

``pyinfra-sglang ab-compare --a DIR... --b DIR... [--json]``: each DIR is a run folder of
deploy/bench.py (its bench.jsonl). Per concurrency, every bench_serving line of a side is one
run (a folder holds ``bench_repeat`` of them). A side's spread is its runs' half range relative
to their mean (the "±6%" of 94..106 around 100). The difference is "noise" when it is no larger
than the larger spread, "real" when it is, and "not enough runs to tell" with fewer than two
runs on a side: one run shows no spread, so nothing can be told from it. The reference case:
CUDA graphs measured +5% against a ±6% spread, which is noise. The judgement itself is
noise_band.py's (shared with the tuner).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.diagnosis.steps import MAX_NUMBER, is_number, is_reading
from pyinfra_sglang.served_benchmark.folder import BENCH_FILE
from pyinfra_sglang.served_benchmark.limits import OverCapError
from pyinfra_sglang.served_benchmark.noise_band import Comparison, compare
from pyinfra_sglang.served_benchmark.regression import throughputs_by_concurrency


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _checked_lines(path: Path) -> list[dict]:
    """bench_serving's lines in ``path``; ValueError naming the file and line for one that
    cannot be read or holds the wrong types where this reads it."""
    try:
        lines = read_json_lines(path, "max_bench_rows")
    except OverCapError:
        raise  # names the file and the cap itself
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot be read: {error}") from None
    for number, line in enumerate(lines, 1):
        where = f"{path}: line {number}"
        if not isinstance(line, dict):
            raise ValueError(f"{where} is not a JSON object")
        concurrency, throughput = line.get("max_concurrency"), line.get("output_throughput")
        # is_number: finite and at most max_number (data/diagnosis.toml [limits]), so that
        # means and spreads of up to max_bench_rows runs stay finite.
        if concurrency is not None and not (
            isinstance(concurrency, int) and is_number(concurrency) and concurrency >= 1
        ):
            raise ValueError(
                f"{where}: max_concurrency is {_shown(concurrency)}, not a whole number from 1 "
                f"to {MAX_NUMBER:g}"
            )
        if throughput is not None and not is_reading(throughput):
            raise ValueError(
                f"{where}: output_throughput is {_shown(throughput)}, not tok/s (a number from "
                f"0 to {MAX_NUMBER:g})"
            )
    return lines


def runs_by_concurrency(folders: list[str | Path]) -> dict[int, list[float]]:
    """Every run's ``output_throughput`` per ``max_concurrency``, over the folders' bench.jsonl;
    ValueError for a folder without one, or one that cannot be read or holds the wrong types."""
    found: dict[int, list[float]] = {}
    for folder in folders:
        path = Path(folder) / BENCH_FILE
        if not path.is_file():
            raise ValueError(f"{folder}: no {BENCH_FILE} (a deploy/bench.py run folder holds one)")
        for concurrency, runs in throughputs_by_concurrency(_checked_lines(path)).items():
            found.setdefault(concurrency, []).extend(runs)
    return found


def _finite(value: object) -> object:
    """``value``, or None for a float that is not finite (JSON has no Infinity or NaN)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def comparison_json(comparison: Comparison) -> dict:
    """A comparison as strict JSON holds it: a number that is not finite (the difference
    against a side A of 0 tok/s) is null."""
    return {key: _finite(value) for key, value in asdict(comparison).items()}


def comparisons_json(comparisons: list[Comparison]) -> str:
    """The comparisons as strict JSON text (ValueError rather than Infinity or NaN)."""
    return json.dumps([comparison_json(c) for c in comparisons], indent=2, allow_nan=False)


def percent(value: float, signed: bool = False) -> str:
    """``value`` as ``+5.0%`` (or ``5.0%``), ``n/a`` when it is not finite."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def format_table(comparisons: list[Comparison]) -> str:
    lines = [
        f"{'concurrency':>11}  {'A tok/s (runs)':>16}  {'B tok/s (runs)':>16}  {'B vs A':>7}  "
        f"{'spread A':>8}  {'spread B':>8}  verdict"
    ]
    for c in comparisons:
        lines.append(
            f"{c.concurrency:>11}  {f'{c.mean_a:.1f} ({c.runs_a})':>16}  "
            f"{f'{c.mean_b:.1f} ({c.runs_b})':>16}  {percent(c.difference_pct, True):>7}  "
            f"{f'±{percent(c.spread_a_pct)}':>8}  {f'±{percent(c.spread_b_pct)}':>8}  "
            f"{c.verdict}"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        comparisons = compare(runs_by_concurrency(args.a), runs_by_concurrency(args.b))
    except ValueError as error:
        print(f"ab-compare: {error}", file=sys.stderr)
        return 2
    if not comparisons:
        print("ab-compare: the two sides share no concurrency", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(comparisons_json(comparisons) + "\n")
    else:
        sys.stdout.write(format_table(comparisons))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--a", nargs="+", required=True, metavar="DIR", help="run folders of side A"
    )
    parser.add_argument(
        "--b", nargs="+", required=True, metavar="DIR", help="run folders of side B"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
