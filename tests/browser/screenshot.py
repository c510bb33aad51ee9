"""Make docs/report-screenshot.png: the report of the real 2x H200 sampler capture
(tests/report_runs.py), rendered by headless Chromium.

    uv run python -m tests.browser.screenshot [docs/report-screenshot.png]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pyinfra_sglang.report.page import read_run, write_report
from tests.browser.chromium import find_chromium, render
from tests.report_runs import h200_sampler_run

ROOT = Path(__file__).resolve().parents[2]


def main(target: Path) -> int:
    binary = find_chromium()
    if binary is None:
        print("no Chromium: run scripts/bootstrap-tests.sh", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as folder:
        page = write_report(read_run(h200_sampler_run(Path(folder))), Path(folder) / "out")
        rendered = render(binary, page, target, 1400, 1750)
    if rendered.console:
        print(f"the page logged: {rendered.console}", file=sys.stderr)
        return 1
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "report-screenshot.png")
    )
