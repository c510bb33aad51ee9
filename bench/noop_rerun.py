"""Wall time of a no-change re-apply of deploy/site.py on 1 and on 4 test hosts.

pyinfra runs hosts in parallel, so four hosts should cost little more than one
(goal: ratio <= 1.5). Boots real test hosts (needs root), applies once to converge them
(stand-in NVIDIA repository, PyPI and SGLang served locally), then times REPEAT no-change
runs for each size and prints medians and their ratio.

    uv run python bench/noop_rerun.py [--repeat 5]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale
from tests.hosts.apply import apply


def noop_run(size: int, inventory: Path) -> None:
    result = apply(inventory)
    if result.returncode != 0 or result.changed():
        raise SystemExit(f"re-apply was not a clean no-change run:\n{result.describe()}")


if __name__ == "__main__":
    raise SystemExit(scale.main(__doc__.splitlines()[0], noop_run))
