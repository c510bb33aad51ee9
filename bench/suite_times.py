"""Where the test suite spends its time: per folder (tests/unit, tests/compat, tests/browser,
tests/integration), per module within each, and the slowest tests, read from pytest's JUnit
XML. Each test's time is pytest's own: its setup, call and teardown (a session fixture's cost
lands on the first test that asks for it). Run the suite with --junitxml, then read it:

    uv run pytest --junitxml=/tmp/suite.xml
    uv run python bench/suite_times.py /tmp/suite.xml [--slowest 30] [--modules 10]

Several files are added up (a suite run in parts: unit, then the host tests); two files
given as --before are compared folder by folder with the ones given after them:

    uv run python bench/suite_times.py --before old-unit.xml old-hosts.xml -- new-unit.xml ...

The seconds per module that tests/sharding.py deals the shards by are written from a
measured run (scripts/test.sh leaves one XML per shard in results/tests/):

    uv run python bench/suite_times.py results/tests/shard-*.xml --write-weights
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

WEIGHTS = Path(__file__).resolve().parents[1] / "tests" / "module_seconds.json"
FOLDERS = ("tests/unit", "tests/compat", "tests/browser", "tests/integration")


@dataclass(frozen=True)
class Case:
    module: str  # tests/unit/test_x.py
    name: str  # test_y[param]
    seconds: float
    outcome: str  # passed, failed, error, skipped

    @property
    def folder(self) -> str:
        parts = self.module.split("/")
        return "/".join(parts[:2]) if len(parts) > 2 else self.module

    @property
    def node(self) -> str:
        return f"{self.module}::{self.name}"


def read_cases(path: Path) -> list[Case]:
    """Every testcase of a JUnit XML file that pytest wrote."""
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # pytest writes tests.unit.test_x (or tests.unit.test_x.TestClass) as the class name.
        parts = classname.split(".")
        module_parts = []
        for part in parts:
            module_parts.append(part)
            if part.startswith("test_") or part.endswith("_test"):
                break
        name = case.get("name", "")
        if len(module_parts) < len(parts):
            name = ".".join(parts[len(module_parts) :]) + "::" + name
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        cases.append(
            Case("/".join(module_parts) + ".py", name, float(case.get("time") or 0), outcome)
        )
    return cases


def read_all(paths: list[Path]) -> list[Case]:
    return [case for path in paths for case in read_cases(path)]


def minutes(seconds: float) -> str:
    return f"{seconds:8.1f} s ({seconds / 60:5.1f} min)"


def per_folder(cases: list[Case]) -> dict[str, tuple[int, float]]:
    totals: dict[str, list[float]] = defaultdict(list)
    for case in cases:
        totals[case.folder].append(case.seconds)
    ordered = [f for f in FOLDERS if f in totals] + sorted(set(totals) - set(FOLDERS))
    return {folder: (len(totals[folder]), sum(totals[folder])) for folder in ordered}


def report(cases: list[Case], slowest: int, modules: int) -> str:
    lines = ["folder                 tests      time"]
    folders = per_folder(cases)
    for folder, (count, seconds) in folders.items():
        lines.append(f"{folder:<20} {count:7d} {minutes(seconds)}")
    total = sum(seconds for _, seconds in folders.values())
    lines.append(f"{'all':<20} {len(cases):7d} {minutes(total)}")
    outcomes = defaultdict(int)
    for case in cases:
        outcomes[case.outcome] += 1
    lines.append("outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())))

    by_module: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_module[case.module].append(case)
    for folder in folders:
        mods = sorted(
            (
                (sum(c.seconds for c in cs), m, len(cs))
                for m, cs in by_module.items()
                if cs[0].folder == folder
            ),
            reverse=True,
        )
        lines.append(f"\n{folder}: the {min(modules, len(mods))} slowest modules")
        for seconds, module, count in mods[:modules]:
            lines.append(f"  {seconds:8.1f} s  {count:4d} tests  {module}")

    lines.append(f"\nthe {slowest} slowest tests")
    for case in sorted(cases, key=lambda c: c.seconds, reverse=True)[:slowest]:
        lines.append(f"  {case.seconds:8.1f} s  {case.node}")
    return "\n".join(lines)


def compare(before: list[Case], after: list[Case]) -> str:
    old, new = per_folder(before), per_folder(after)
    lines = ["folder                 before (tests)          after (tests)      change"]
    for folder in [f for f in FOLDERS if f in old or f in new] + sorted(
        (set(old) | set(new)) - set(FOLDERS)
    ):
        (n0, s0), (n1, s1) = old.get(folder, (0, 0.0)), new.get(folder, (0, 0.0))
        change = f"{(s1 - s0) / s0:+.0%}" if s0 else "n/a"
        lines.append(f"{folder:<20} {s0:8.1f} s ({n0:4d})   {s1:8.1f} s ({n1:4d})   {change:>7}")
    t0 = sum(s for _, s in old.values())
    t1 = sum(s for _, s in new.values())
    lines.append(
        f"{'all':<20} {t0:8.1f} s ({len(before):4d})   {t1:8.1f} s ({len(after):4d})   "
        f"{(t1 - t0) / t0:+.0%}"
    )
    return "\n".join(lines)


def module_seconds(cases: list[Case]) -> dict[str, float]:
    """Seconds per module, rounded to a tenth, sorted by module: tests/module_seconds.json."""
    totals: dict[str, float] = defaultdict(float)
    for case in cases:
        totals[case.module] += case.seconds
    return {module: round(totals[module], 1) for module in sorted(totals)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", nargs="*", type=Path, help="JUnit XML files pytest wrote")
    parser.add_argument("--before", nargs="+", type=Path, help="the earlier run's files")
    parser.add_argument("--slowest", type=int, default=30)
    parser.add_argument("--modules", type=int, default=10)
    parser.add_argument(
        "--write-weights",
        nargs="?",
        const=WEIGHTS,
        type=Path,
        metavar="PATH",
        help=f"write the seconds per module for the shards' deal (default {WEIGHTS})",
    )
    args = parser.parse_args(argv)
    if not args.xml:
        parser.error("name at least one JUnit XML file")
    after = read_all(args.xml)
    if args.write_weights:
        weights = module_seconds(after)
        args.write_weights.write_text(json.dumps(weights, indent=1) + "\n")
        print(f"{args.write_weights}: {len(weights)} modules, {sum(weights.values()):.0f} s")
    if args.before:
        print(compare(read_all(args.before), after))
        return 0
    if len(args.xml) > 1:  # shards run side by side: the run takes as long as the longest
        for path in args.xml:
            cases = read_cases(path)
            print(f"{path}: {len(cases)} tests, {minutes(sum(c.seconds for c in cases))}")
        print()
    print(report(after, args.slowest, args.modules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
