"""Facts pyinfra-sglang reads from hosts: small FactBase classes that parse real output."""

from __future__ import annotations

import re
import shlex
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


# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
_NVRM = re.compile(r"^NVRM version:\s+NVIDIA UNIX\b(?P<banner>.*?)\s(?P<version>\d+\.\d+(?:\.\d+)?)\s")


class NvidiaLoadedModuleDict(TypedDict):
    version: str
    flavor: str  # "open" or "proprietary"


class NvidiaLoadedModule(FactBase[NvidiaLoadedModuleDict | None]):
    """The NVIDIA kernel module the running kernel has loaded, from /proc/driver/nvidia/version;
    None when no NVIDIA module is loaded."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output) -> NvidiaLoadedModuleDict | None:
        for line in output:
            match = _NVRM.match(line)
            if match:
                flavor = "open" if "Open Kernel Module" in match["banner"] else "proprietary"
                return {"version": match["version"], "flavor": flavor}
        return None


# "Cuda compilation tools, release 13.1, V13.1.80"
_NVCC_RELEASE = re.compile(r"release (?P<release>\d+\.\d+), V(?P<version>[\d.]+)")


class NvccReleaseDict(TypedDict):
    release: str
    version: str


class NvccRelease(FactBase[NvccReleaseDict | None]):
    """What ``nvcc --version`` at ``path`` reports; None when there is no nvcc there."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version || true"

    def process(self, output) -> NvccReleaseDict | None:
        for line in output:
            match = _NVCC_RELEASE.search(line)
            if match:
                return {"release": match["release"], "version": match["version"]}
        return None


class AptSourceEntry(TypedDict):
    file: str
    line: int  # 1-based line of the entry (one-line format) or of its Components: field
    format: str  # "one-line" or "deb822"
    uris: list[str]
    components: list[str]


class AptSourceEntries(FactBase[list[AptSourceEntry]]):
    """The host's apt source entries that name components (``main`` and friends).

    Flat repositories (suite ``/``, as NVIDIA's) have no components and are not listed.
    """

    def command(self) -> str:
        return (
            "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
            "/etc/apt/sources.list.d/*.sources; do "
            '[ -f "$f" ] && awk -v f="$f" \'{print f "\\t" FNR "\\t" $0}\' "$f"; '
            "done; true"
        )

    def process(self, output) -> list[AptSourceEntry]:
        entries: list[AptSourceEntry] = []
        stanza_uris: dict[str, list[str]] = {}
        for raw in output:
            path, number, text = (raw.split("\t", 2) + ["", ""])[:3]
            text = text.split("#", 1)[0].strip()
            if path.endswith(".sources"):
                key, _, value = text.partition(":")
                if not text:
                    stanza_uris.pop(path, None)
                elif key.strip().lower() == "uris":
                    stanza_uris[path] = value.split()
                elif key.strip().lower() == "components":
                    entries.append({
                        "file": path, "line": int(number), "format": "deb822",
                        "uris": stanza_uris.get(path, []), "components": value.split(),
                    })  # fmt: skip
                continue
            words = re.sub(r"\[[^]]*\]", " ", text).split()
            if len(words) >= 4 and words[0] in ("deb", "deb-src"):
                entries.append({
                    "file": path, "line": int(number), "format": "one-line",
                    "uris": [words[1]], "components": words[3:],
                })  # fmt: skip
        return entries
