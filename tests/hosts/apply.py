"""Run the pyinfra CLI against test hosts and read back per-operation results.

``apply()`` runs ``pyinfra -y --json INVENTORY DEPLOY`` from the repository root, as a user
would, and returns an ``ApplyResult`` that says which operations changed which hosts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"


@dataclass
class ApplyResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None  # pyinfra's --json payload: {"plan": [...], "results": ...}

    @property
    def operations(self) -> list[dict[str, Any]]:
        if not self.report or not self.report.get("results"):
            return []
        return self.report["results"]["operations"]

    @property
    def executed(self) -> bool:
        """Did pyinfra reach the execution stage at all?"""
        return "--> Beginning operation run" in self.stderr

    def changed(self, host: str | None = None) -> list[str]:
        """Names of the operations that changed ``host`` (any host when None)."""
        return [
            op["name"]
            for op in self.operations
            if (host in op["success"] if host else op["success"])
        ]

    def logged_changes(self) -> list[str]:
        """Lines where pyinfra logged an operation that executed commands ("[host] Success"):
        the evidence of change when a failed run prints no JSON results."""
        return [line for line in self.stderr.splitlines() if "] Success" in line]

    def errors(self) -> list[str]:
        return [op["name"] for op in self.operations if op["error"]]

    def unchanged(self, host: str) -> list[str]:
        return [op["name"] for op in self.operations if host in op["no_change"]]

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.args)}\nexit {self.returncode}\n--- stderr ---\n"
            f"{self.stderr[-6000:]}\n--- stdout ---\n{self.stdout[-3000:]}"
        )


def write_inventory(path: Path, groups: dict[str, list[tuple[str, dict[str, Any]]]]) -> Path:
    """Write a pyinfra inventory file: one list of (host, data) tuples per group."""
    lines = ['"""Test inventory written by tests/hosts/apply.py."""', ""]
    for group, hosts in groups.items():
        lines.append(f"{group} = [")
        lines += [f"    ({name!r}, {data!r})," for name, data in hosts]
        lines.append("]")
    path.write_text("\n".join(lines) + "\n")
    return path


def apply(
    inventory: Path | str,
    *operations: str,
    options: tuple[str, ...] = (),
    dry: bool = False,
    timeout: float = 1200,
) -> ApplyResult:
    """Run ``pyinfra [options] INVENTORY OPERATIONS...`` (default: deploy/site.py).

    Never raises on a failed run: the result carries the exit code and output."""
    operations = operations or ("deploy/site.py",)
    args = [
        str(PYINFRA),
        "-y",
        "--json",
        *(["--dry"] if dry else []),
        *options,
        str(inventory),
        *operations,
    ]
    env = {**os.environ, "PYINFRA_PROGRESS": "off"}
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    try:
        report = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        report = None
    return ApplyResult(args, proc.returncode, proc.stdout, proc.stderr, report)
