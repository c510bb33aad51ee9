"""Wall time of deploy/audit.py on 1, 4 and 16 test hosts, and their ratios to one host.

pyinfra audits hosts in parallel (each host's reading, decode prompt and link sampling run
at once), so sixteen hosts should cost at most twice one (goal: ratio <= 2.0). Boots real
test hosts (needs root), converges them with deploy/site.py (the tests' stand-ins for
NVIDIA's repository, PyPI and SGLang, replaying the real 2x H200 capture), then times
REPEAT audits of each size, prints each median and its runs, the curve and the goal line,
and traces one more audit at the largest size (connect, prepare with its facts, operations,
disconnect). The audits fail on driver-drift (the capture runs driver 580, the inventory
wants 590): that is expected and checked, as is that no audit changed anything.

    uv run python bench/audit_scale.py [--repeat 5] [--sizes 1,4,16] [--no-trace]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale
from tests.hosts.apply import ApplyResult, apply


def audit_run(size: int, inventory: Path, apply: Callable[..., ApplyResult] = apply) -> None:
    reports = inventory.parent / f"reports{size}"
    result = apply(inventory, "deploy/audit.py", options=("--data", f"audit_report_dir={reports}"))
    failed = {
        f["code"]
        for path in reports.glob("*.json")
        for f in json.loads(path.read_text())["findings"]
        if f["level"] == "fail"
    }
    if result.logged_changes() or failed != {"driver-drift"}:
        raise SystemExit(f"unexpected audit (failing: {sorted(failed)}):\n{result.describe()}")


if __name__ == "__main__":
    raise SystemExit(scale.main(__doc__.splitlines()[0], audit_run))
