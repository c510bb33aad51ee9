"""Facts of apt and dpkg: sources, policy, repository entries, NVIDIA's nvidia-smi package."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.files import (
    parse_first_nonempty,
)
from pyinfra_sglang.parsers.system import (
    AptSourceEntry,
    RepositoryEntry,
    parse_apt_policy,
    parse_apt_source_entries,
    parse_repository_entries,
)


class NvidiaSmiPackage(FactBase[str | None]):
    """The package that installed the nvidia-smi on PATH (dpkg -S); None without either."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return (
            'dpkg -S "$(readlink -f "$(command -v nvidia-smi)")" 2>/dev/null '
            "| head -n1 | cut -d: -f1 || true"
        )

    def process(self, output) -> str | None:
        return parse_first_nonempty(output)


class AptSourceEntries(FactBase[list[AptSourceEntry]]):
    """The host's apt source entries that name components (see parse_apt_source_entries)."""

    @staticmethod
    def default() -> list[AptSourceEntry]:
        return []

    def command(self) -> str:
        return (
            "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
            "/etc/apt/sources.list.d/*.sources; do "
            '[ -f "$f" ] && awk -v f="$f" \'{print f "\\t" FNR "\\t" $0}\' "$f"; '
            "done; true"
        )

    def process(self, output) -> list[AptSourceEntry]:
        return parse_apt_source_entries(output)


class AptPolicy(FactBase[dict]):
    """Installed and candidate versions of ``packages`` (see parse_apt_policy)."""

    @staticmethod
    def default() -> dict:
        return {}

    def requires_command(self, packages: list[str]) -> str:
        return "apt-cache"

    def command(self, packages: list[str]) -> str:
        names = " ".join(shlex.quote(name) for name in packages)
        return f"apt-cache policy {names} 2>/dev/null || true"

    def process(self, output) -> dict:
        return parse_apt_policy(output)


class RepositoryEntries(FactBase[list[RepositoryEntry]]):
    """The host's active apt source entries, one-line or deb822, with their URIs (see
    parse_repository_entries)."""

    @staticmethod
    def default() -> list[RepositoryEntry]:
        return []

    def command(self) -> str:
        return AptSourceEntries().command()

    def process(self, output) -> list[RepositoryEntry]:
        return parse_repository_entries(output)
