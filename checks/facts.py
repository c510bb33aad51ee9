"""Facts pyinfra-sglang reads from hosts: small FactBase classes that parse real output."""

from __future__ import annotations

from typing import TypedDict

from pyinfra.api import FactBase


class VirtualizationDict(TypedDict):
    container: str | None
    vm: str | None


class Virtualization(FactBase[VirtualizationDict]):
    """Container and VM technology the host runs in, from ``systemd-detect-virt``.

    ``{"container": "systemd-nspawn", "vm": None}``; None where there is none. A host without
    systemd-detect-virt reports ``"unknown"`` for both.
    """

    # systemd-detect-virt prints "none" and exits 1 when it finds nothing.
    def command(self) -> str:
        return (
            "if command -v systemd-detect-virt >/dev/null 2>&1; then "
            "systemd-detect-virt --container || true; systemd-detect-virt --vm || true; "
            "else echo unknown; echo unknown; fi"
        )

    def process(self, output) -> VirtualizationDict:
        lines = [line.strip() for line in output if line.strip()]
        container, vm = (lines + ["none", "none"])[:2]
        return {
            "container": None if container == "none" else container,
            "vm": None if vm == "none" else vm,
        }


class KernelHeadersDict(TypedDict):
    kernel_release: str
    package: str
    installed: bool
    candidate: str | None
    apt_lists_present: bool


class KernelHeaders(FactBase[KernelHeadersDict]):
    """The headers package for the running kernel: installed? which candidate does apt offer?

    ``package_template`` names the package, with ``{kernel_release}`` for ``uname -r``.
    ``apt_lists_present`` tells whether ``candidate: None`` means "the distro does not ship
    it" (lists present) or "apt has never been updated" (no lists).
    """

    def command(self, package_template: str = "linux-headers-{kernel_release}") -> str:
        package = package_template.replace("{kernel_release}", "$(uname -r)")
        return (
            f'release=$(uname -r); pkg="{package}"; echo "$release"; echo "$pkg"; '
            "dpkg-query -W -f='${Status}\\n' \"$pkg\" 2>/dev/null | grep -q ' installed$' "
            "&& echo installed || echo absent; "
            "apt-cache policy \"$pkg\" 2>/dev/null | awk '/Candidate:/ {print $2}' | "
            "grep . || echo '(none)'; "
            "ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages' && echo lists || echo nolists"
        )

    def process(self, output) -> KernelHeadersDict:
        release, package, installed, candidate, lists = [line.strip() for line in output][:5]
        return {
            "kernel_release": release,
            "package": package,
            "installed": installed == "installed",
            "candidate": None if candidate == "(none)" else candidate,
            "apt_lists_present": lists == "lists",
        }
