"""The audit's report: a table per host for people, a JSON file per host for machines."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from pyinfra_sglang.audit.findings import LEVELS, Finding, worst_level
from pyinfra_sglang.run_summary import with_inventory
from pyinfra_sglang.safe_write import write_file
from pyinfra_sglang.terminal import shown


def safe_name(host_name: str) -> str:
    """A host's name as a file or folder name: pyinfra names hosts ``@local`` or
    ``@docker/<id>``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", host_name).strip("_.") or "host"


def summary(findings: list[Finding]) -> str:
    counts = {level: sum(f.level == level for f in findings) for level in LEVELS}
    return ", ".join(f"{counts[level]} {level}" for level in reversed(LEVELS))


def format_table(host: str, findings: list[Finding], what: str = "audit") -> str:
    """Failures first, then warnings, then what is fine; one line per finding."""
    ordered = sorted(findings, key=lambda f: (-LEVELS.index(f.level), f.code, f.gpu or 0))
    width = max([len(f.code) for f in ordered] + [4])
    lines = [f"{what} of {host}: {worst_level(findings).upper()} ({summary(findings)})"]
    lines.append(f"  {'LEVEL':5}  {'CODE':{width}}  GPU  MESSAGE")
    for f in ordered:
        gpu = "-" if f.gpu is None else str(f.gpu)
        lines.append(f"  {f.level:5}  {f.code:{width}}  {gpu:>3}  {f.message}")
    # Messages carry what hosts reported (GPU names, paths): no escape sequence reaches the
    # terminal (issue 35 N10).
    return shown("\n".join(lines))


def report(host: str, findings: list[Finding], facts: dict) -> dict:
    return {
        "host": host,
        "result": worst_level(findings),
        "summary": summary(findings),
        "findings": [f.as_dict() for f in findings],
        "facts": facts,
    }


def findings_for_inventory(findings: list[Finding], inventory: str | None) -> list[Finding]:
    """The findings with their remediations' ``pyinfra INVENTORY deploy/site.py`` naming the
    inventory this run was started with (None: left generic)."""
    return [dataclasses.replace(f, message=with_inventory(f.message, inventory)) for f in findings]


def unreachable_report(host: str, error: str) -> dict:
    """The report of a host the audit could not connect to: no findings, the error."""
    return {
        "host": host,
        "result": "unreachable",
        "status": "unreachable",
        "summary": "unreachable",
        "error": error,
        "findings": [],
        "facts": {},
    }


def write_report(path: Path, data: dict) -> Path:
    """Write atomically (a reader never sees half a report), never through a link or into
    a FIFO planted at its name (pyinfra_sglang/safe_write.py)."""
    return write_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
