"""Facts of systemd: a unit's state, what a removed unit left."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.system import (
    parse_systemd_show,
)


class SystemdUnitState(FactBase[dict[str, str]]):
    """``systemctl show`` properties of one unit: LoadState (``not-found`` when there is no
    such unit), ActiveState, SubState, Result (``start-limit-hit`` after a crash loop),
    NRestarts, ActiveEnterTimestamp."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        return (
            "systemctl show -p LoadState -p ActiveState -p SubState -p Result -p NRestarts "
            f"-p ActiveEnterTimestamp {shlex.quote(unit)} 2>/dev/null || true"
        )

    def process(self, output) -> dict[str, str]:
        return parse_systemd_show(output)


class UnitLeftovers(FactBase[list[str]]):
    """What is left on the host of a systemd ``unit`` and its ``paths``: "enabled" and
    "active" when systemd says so, then each of ``paths`` that exists; [] for none of them.
    One command where checking for a removal would read a fact per file and two for the
    unit."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, unit: str, paths: list[str]) -> str:
        q = shlex.quote
        quoted = " ".join(q(p) for p in paths)
        return (
            f"systemctl is-enabled --quiet {q(unit)} 2>/dev/null && echo enabled; "
            f"systemctl is-active --quiet {q(unit)} 2>/dev/null && echo active; "
            f'for p in {quoted}; do if [ -e "$p" ]; then echo "$p"; fi; done; true'
        )

    def process(self, output) -> list[str]:
        return [line.strip() for line in output if line.strip()]
