"""Reading the JSON report deploy/audit.py writes per host, for the tests on hosts."""

from __future__ import annotations

import json
from pathlib import Path


def findings(report_dir: Path, address: str) -> dict[str, list[dict]]:
    """{code: [findings]} of one host's report."""
    by_code: dict[str, list[dict]] = {}
    for finding in json.loads((report_dir / f"{address}.json").read_text())["findings"]:
        by_code.setdefault(finding["code"], []).append(finding)
    return by_code


def levels(by_code: dict[str, list[dict]], level: str) -> set[str]:
    """The codes with at least one finding at ``level``."""
    return {code for code, found in by_code.items() if any(f["level"] == level for f in found)}
