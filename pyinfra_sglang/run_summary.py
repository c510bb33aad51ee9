"""The lines a pyinfra run of this project ends with: one per host, what happened to it.

Pure: outcomes in, text out. checks/run_summary.py reads them off pyinfra's state.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pyinfra_sglang.redact import redact

Status = Literal["ok", "changed", "failed", "unreachable", "would-change", "no-change"]

# A reason longer than this is cut: the summary is one line a host.
REASON_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Remediations name the inventory as this word wherever the run's own is not known.
INVENTORY_WORD = "INVENTORY"


@dataclass(frozen=True)
class HostOutcome:
    host: str
    status: Status
    changed: int = 0
    # failed: why (the first failure); unreachable: the connection error.
    reason: str = ""
    # would-change: the operations a --dry run found would change the host.
    operations: tuple[str, ...] = field(default_factory=tuple)


def one_line(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` as one line for a summary: colours and line breaks gone, secrets masked,
    cut at REASON_CHARS."""
    flat = " ".join(_ANSI.sub("", redact(text, secrets)).split())
    return flat if len(flat) <= REASON_CHARS else flat[: REASON_CHARS - 3] + "..."


def summary_line(outcome: HostOutcome) -> str:
    """``[host] ok``, ``[host] changed 3``, ``[host] failed: ...``, ``[host] unreachable:
    ...``, ``[host] would change: a, b``, ``[host] no change``."""
    prefix = f"[{outcome.host}] "
    if outcome.status == "changed":
        return f"{prefix}changed {outcome.changed}"
    if outcome.status in ("failed", "unreachable"):
        return f"{prefix}{outcome.status}: {one_line(outcome.reason) or 'no reason given'}"
    if outcome.status == "would-change":
        return f"{prefix}would change: {one_line(', '.join(outcome.operations))}"
    if outcome.status == "no-change":
        return f"{prefix}no change"
    return f"{prefix}ok"


def summary_lines(outcomes: Iterable[HostOutcome]) -> list[str]:
    """One line a host, in host name order (parallel hosts finish in any order)."""
    return [summary_line(outcome) for outcome in sorted(outcomes, key=lambda o: o.host)]


def prefixed(host: str, text: str) -> str:
    """Every line of ``text`` after the first with ``[host] `` in front, indented as pyinfra
    indents the first: pyinfra prefixes only the first line of a message, and a table from
    one of several hosts must say whose it is on each line."""
    first, *rest = text.split("\n")
    return "\n".join([first, *(f"    [{host}] {line}" for line in rest)])


def with_inventory(text: str, inventory: str | None) -> str:
    """A remediation's ``pyinfra INVENTORY ...`` with the inventory the run was started
    with, shell-quoted; unchanged when that is not known (``analyze``, offline)."""
    if not inventory:
        return text
    return text.replace(f"pyinfra {INVENTORY_WORD} ", f"pyinfra {shlex.quote(inventory)} ")
