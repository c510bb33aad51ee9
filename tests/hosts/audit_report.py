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


def assert_audit_changed_nothing(result, report_dir: Path, hosts: list[str] | None = None) -> None:
    """An audit run wrote every host's report, reached each host it could connect to, and
    changed none of them.

    The audit exits 1 exactly when some report holds a failing finding (fail_run) or says its
    host was unreachable, so the exit code expected is read from the reports: a crash, an exit
    the reports do not explain, a host missing from the results or an operation that changed
    a host fails here. ``hosts``: default, those the run was meant to reach."""
    hosts = list(result.expected_hosts if hosts is None else hosts)
    reports = {
        address: json.loads((report_dir / f"{address}.json").read_text()) for address in hosts
    }
    unreachable = [a for a, report in reports.items() if report.get("status") == "unreachable"]
    failing = any(f["level"] == "fail" for report in reports.values() for f in report["findings"])
    reached = [address for address in hosts if address not in unreachable]
    result.assert_unchanged(reached, returncode=1 if failing or unreachable else 0)
