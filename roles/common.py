"""Helpers every role uses: the host's platform and installing apt packages."""

from __future__ import annotations

from pyinfra import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Arch, LinuxDistribution
from pyinfra.operations import apt

from pyinfra_sglang.platform import Platform, resolve_platform


def host_platform() -> Platform:
    """The current host's platform; refuses an unsupported distro or arch before any change."""
    release = host.get_fact(LinuxDistribution)["release_meta"]
    return resolve_platform(host.name, release, host.get_fact(Arch))


def ensure_packages(name: str, packages: list[str]) -> None:
    """Install missing packages without recommends; refresh apt's lists only when installing,
    so a host that has everything is not touched."""
    installed = host.get_fact(DebPackages)
    missing = [package for package in packages if package not in installed]
    apt.packages(name=name, packages=packages, no_recommends=True, update=bool(missing))
