"""Run the pyinfra CLI against test hosts and read back per-operation results.

``apply()`` runs ``pyinfra -y --json INVENTORY DEPLOY`` from the repository root, as a user
would, and returns an ``ApplyResult`` that says which operations changed which hosts.

"Nothing changed" is the claim the suite leans on most, and a run that crashed changed nothing
too: ``assert_unchanged()`` holds only for a run that reached every host of its inventory,
ran to its end there, and changed none of them. ``changed()`` refuses to answer for a run that
printed no results, or for a host the results do not hold.
"""

from __future__ import annotations

import json
import os
import re
import runpy
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
    # The hosts this run was meant to reach: the inventory's, narrowed by --limit; None when
    # they cannot be known from the arguments (assert_unchanged then needs them named).
    expected_hosts: tuple[str, ...] | None = None

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
        """Names of the operations that changed ``host`` (any host when None).

        Raises AssertionError for a run that printed no results (it crashed, or stopped before
        executing) and for a host no operation of the results ran on: an empty list would
        claim "no change" about a run that never got there."""
        if self.results is None:
            raise AssertionError(f"no results: the run did not complete\n{self.describe()}")
        if host is not None and host not in self.reached_hosts():
            raise AssertionError(f"{host} was not reached by the run\n{self.describe()}")
        return [
            op["name"]
            for op in self.operations
            if (host in op["success"] if host else op["success"])
        ]

    @property
    def results(self) -> dict[str, Any] | None:
        return (self.report or {}).get("results")

    def reached_hosts(self) -> set[str]:
        """Hosts some operation ran on, successfully or not, and hosts pyinfra connected to
        (its "[host] Connected" line): a deploy may have no operation for a host at all."""
        ran = {
            name
            for op in self.operations
            for name in (*op["success"], *op["no_change"], *op["error"])
        }
        connected = {
            match[1]
            for match in re.finditer(r"^\s*\[([^\]\n]+)\] Connected\s*$", self.stderr, re.M)
        }
        return ran | connected

    def unchanged_problems(
        self, hosts: tuple[str, ...] | list[str] | None = None, *, returncode: int = 0
    ) -> list[str]:
        """Why this run does not show "nothing changed" on ``hosts`` (default: the hosts the
        run was meant to reach); an empty list when it does.

        A run shows it when it exited with ``returncode`` (an audit that finds a fault exits
        1 with every operation succeeding: say so), printed its results, reached every host,
        no operation failed on any host, and none changed one."""
        hosts = self.expected_hosts if hosts is None else tuple(hosts)
        if hosts is None:
            raise ValueError("which hosts this run was meant to reach is unknown: name them")
        problems = []
        if self.returncode != returncode:
            problems.append(f"exit code {self.returncode}, expected {returncode}")
        if self.results is None:
            return [*problems, "no results printed: the run did not complete"]
        reached = self.reached_hosts()
        problems += [
            f"{name}: not reached (in no operation's results, never connected)"
            for name in hosts
            if name not in reached
        ]
        problems += [
            f"{op['name']}: failed on {', '.join(op['error'])}"
            for op in self.operations
            if op["error"]
        ]
        problems += [
            f"{op['name']}: changed {', '.join(op['success'])}"
            for op in self.operations
            if op["success"]
        ]
        return problems

    def assert_unchanged(
        self, hosts: tuple[str, ...] | list[str] | None = None, *, returncode: int = 0
    ) -> None:
        """Fail, saying why and showing the run, unless the run shows nothing changed
        (``unchanged_problems``)."""
        problems = self.unchanged_problems(hosts, returncode=returncode)
        assert not problems, "\n".join(
            ["not a run that changed nothing:", *problems, self.describe()]
        )

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
    expected = _expected_hosts(inventory, options)
    return ApplyResult(args, proc.returncode, proc.stdout, proc.stderr, report, expected)


def inventory_hosts(inventory: Path | str) -> tuple[str, ...] | None:
    """The host names of a Python inventory file as pyinfra reads it: each top-level list or
    tuple of names or (name, data) pairs is a group; None for one that is not a file."""
    path = Path(inventory)
    if not path.is_file() or path.suffix != ".py":
        return None
    names: list[str] = []
    for key, value in runpy.run_path(str(path)).items():
        if key.startswith("_") or not isinstance(value, list | tuple):
            continue
        for entry in value:
            name = entry[0] if isinstance(entry, tuple) else entry
            if isinstance(name, str) and name not in names:
                names.append(name)
    return tuple(names)


def _expected_hosts(inventory: Path | str, options: tuple[str, ...]) -> tuple[str, ...] | None:
    names = inventory_hosts(inventory)
    if names is None:
        return None
    limits = [options[i + 1] for i, option in enumerate(options[:-1]) if option == "--limit"]
    if not limits:
        return names
    wanted = {part for limit in limits for part in limit.split(",")}
    # Only plain names are followed here; a glob or group name leaves the hosts to be named.
    return tuple(name for name in names if name in wanted) if wanted <= set(names) else None
