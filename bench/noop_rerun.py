"""Wall time of a no-change re-apply of deploy/site.py on 1, 4 and 16 test hosts.

pyinfra runs hosts in parallel, so sixteen hosts should cost at most twice one (goal:
ratio <= 2.0). Boots real test hosts (needs root), applies once to converge them (stand-in
NVIDIA repository, PyPI and SGLang served locally), then times REPEAT no-change runs for
each size, prints each median and its runs, the curve and the goal line, and traces one
more run at the largest size: connect, prepare (facts), operations and disconnect seconds,
and the remote commands a host (pyinfra's --debug "Running command on" lines: every shell
command sent, fact reads and operations alike). Ends with a summary line: commands a host
and the largest/smallest ratio. --list-commands lists one host's commands.

    uv run python bench/noop_rerun.py [--repeat 5] [--sizes 1,4,16] [--no-trace]
        [--trace-log FILE] [--list-commands] [--before DIR]

--before DIR times a checkout of an earlier commit first, on the same converged hosts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale
from tests.hosts.apply import ApplyResult, apply


def noop_run(size: int, inventory: Path, apply: Callable[..., ApplyResult] = apply) -> None:
    result = apply(inventory)
    if result.returncode != 0 or result.changed():
        raise SystemExit(f"re-apply was not a clean no-change run:\n{result.describe()}")


if __name__ == "__main__":
    raise SystemExit(scale.main(__doc__.splitlines()[0], noop_run))
