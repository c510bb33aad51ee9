"""Helpers every role uses: the host's platform, installing apt packages, and the connector
arguments of the running operation."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
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


def connector_arguments(host_=None) -> dict:
    """The running operation's connector arguments (``_sudo``, ``_su_user``, ...). Facts and
    yielded commands get them from pyinfra; direct ``run_shell_command``/``put_file``/``get_file``
    calls from inside an operation must pass them on, or they run as the SSH user."""
    current = (host if host_ is None else host_).current_op_global_arguments or {}
    return {key: current[key] for key in CONNECTOR_ARGUMENT_KEYS if key in current}
