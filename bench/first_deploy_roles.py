"""Where the time of a first deploy goes, role by role: boots fresh test hosts (needs root),
applies deploy/site.py once against the tests' stand-ins (NVIDIA's repository, PyPI, the Hub
and SGLang, served locally) with pyinfra's --debug, and prints a table of seconds by role.

pyinfra runs one operation at a time across the hosts, so the time from an operation's
"Starting operation" line to the next one's is that operation's on the slowest host; an
operation's role is its name's prefix ("SGLang service | ..."). Planning (connect, facts
read before any change) is its own row. Downloads come from loopback stand-ins and no
flash-attn is built: on real hosts the NVIDIA packages, the wheels and the weights cost
what the uplink makes them.

    uv run python bench/first_deploy_roles.py [--hosts 1] [--markdown]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale

STARTING = re.compile(r"Starting operation (?P<names>\{.*?\}|\(.*?\)|\[.*?\]|'.*?') on ")
OUTSIDE = "(no role)"


def role_of(names: str) -> str:
    """The role prefix of an operation's names as --debug prints them (a set of strings)."""
    try:
        parsed = ast.literal_eval(names)
    except (ValueError, SyntaxError):
        parsed = names
    name = sorted(parsed)[0] if isinstance(parsed, (set, list, tuple)) else str(parsed)
    return name.split(" | ", 1)[0] if " | " in name else OUTSIDE


def seconds_by_role(stamped: list[tuple[float, str]]) -> tuple[dict[str, float], dict, float]:
    """(seconds by role in the order roles first ran, operations by role, planning seconds)
    from the stamped stderr lines of one pyinfra run."""
    start = stamped[0][0] if stamped else 0.0
    planning_end = None
    ends = None
    starts: list[tuple[float, str]] = []
    for at, line in stamped:
        if "--> Beginning operation run" in line:
            planning_end = at
        elif "--> Results" in line or "--> Disconnecting from hosts" in line:
            ends = ends or at
        elif planning_end is not None and (match := STARTING.search(line)):
            starts.append((at, role_of(match["names"])))
    seconds: dict[str, float] = defaultdict(float)
    operations: dict[str, int] = defaultdict(int)
    last = ends if ends is not None else (stamped[-1][0] if stamped else 0.0)
    for (at, role), (stop, _) in zip(starts, [*starts[1:], (last, "")]):
        seconds[role] += stop - at
        operations[role] += 1
    planning = (planning_end - start) if planning_end is not None else 0.0
    return dict(seconds), dict(operations), planning


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    stamped: list[tuple[float, str]] = []

    def first_apply(inventory, timeout):
        result, trace = scale.traced_apply(inventory, timeout=timeout, stamped=stamped)
        print(f"first deploy: {trace.total:.1f} s, pyinfra CPU {trace.cpu:.1f} s", flush=True)
        return result

    with scale.converged_site(args.hosts, first_apply=first_apply):
        pass
    seconds, operations, planning = seconds_by_role(stamped)
    total = planning + sum(seconds.values())
    rows = [("planning (connect, facts)", planning, "")]
    rows += [(role, s, str(operations[role])) for role, s in seconds.items()]
    if args.markdown:
        hosts = f"{args.hosts} host{'s' if args.hosts > 1 else ''}"
        print(f"\n| role ({hosts}) | seconds | share | operations |")
        print("| --- | ---: | ---: | ---: |")
        for role, s, ops in rows:
            print(f"| {role} | {s:.1f} | {s / total:.0%} | {ops} |")
        print(f"| total | {total:.1f} | 100% | {sum(operations.values())} |")
    else:
        for role, s, ops in rows:
            print(f"{role:40} {s:8.1f} s {s / total:6.0%} {ops:>5}")
        print(f"{'total':40} {total:8.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
