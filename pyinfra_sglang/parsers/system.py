"""Parsers of what Linux tools and files print: systemd, apt, dpkg, /proc, python, sha256sum."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NotRequired, TypedDict


class VirtualizationDict(TypedDict):
    container: str | None
    vm: str | None


def parse_virtualization(output: Iterable[str]) -> VirtualizationDict:
    """``systemd-detect-virt --container`` then ``--vm`` (each prints ``none`` when it finds
    nothing) as ``{"container": "systemd-nspawn", "vm": None}``; None where there is none.

    A host without systemd-detect-virt reports ``"unknown"`` for the container, and for the
    VM ``"hypervisor"`` when the CPU flags say it runs under one (a Firecracker VM), else
    ``"unknown"``.
    """
    lines = [line.strip() for line in output if line.strip()]
    container, vm = (lines + ["none", "none"])[:2]
    return {
        "container": None if container == "none" else container,
        "vm": None if vm == "none" else vm,
    }


def detected_vm(virtualization: dict | None) -> str | None:
    """The VM technology a Virtualization fact found; None for none or unknown."""
    vm = (virtualization or {}).get("vm")
    return None if vm in (None, "none", "unknown") else vm


class KernelHeadersDict(TypedDict):
    kernel_release: str
    package: str
    installed: bool
    candidate: str | None
    apt_lists_present: bool


def parse_kernel_headers(output: Iterable[str]) -> KernelHeadersDict:
    """The KernelHeaders fact's five lines: ``uname -r``, the package name, ``installed`` or
    ``absent``, apt's candidate version or ``(none)`` (``(not asked)`` for an installed
    package: None too), ``lists`` or ``nolists``.

    ``apt_lists_present`` tells whether ``candidate: None`` means "the distro does not ship
    it" (lists present) or "apt has never been updated" (no lists).
    """
    release, package, installed, candidate, lists = [line.strip() for line in output][:5]
    return {
        "kernel_release": release,
        "package": package,
        "installed": installed == "installed",
        "candidate": None if candidate in ("(none)", "(not asked)") else candidate,
        "apt_lists_present": lists == "lists",
    }


class DkmsStateDict(TypedDict):
    kernels: list[str]  # installed kernels (/boot/vmlinuz-<release>), oldest first
    built: dict[str, list[str]]  # kernel release -> NVIDIA module versions DKMS installed


def kernel_sort_key(release: str) -> tuple:
    """6.1.0-28-amd64 after 6.1.0-9-amd64: numbers compare as numbers."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", release)
        if part
    )


def parse_dkms_state(output: Iterable[str]) -> DkmsStateDict:
    """``kernel <release>`` lines, then ``dkms status nvidia`` lines in either format dkms
    has printed: ``nvidia/595.45.04, 6.19.6+deb14-amd64, x86_64: installed`` (dkms 3) or
    ``nvidia, 590.48.01, 6.1.0-28-amd64, x86_64: installed`` (dkms 2)."""
    kernels: list[str] = []
    built: dict[str, list[str]] = {}
    for raw in output:
        line = raw.strip()
        if line.startswith("kernel "):
            kernels.append(line.removeprefix("kernel ").strip())
            continue
        head, _, state = line.rpartition(":")
        if state.strip() != "installed":
            continue
        fields = [part.strip() for part in head.replace("/", ", ", 1).split(",")]
        if len(fields) >= 3 and fields[0] == "nvidia":
            built.setdefault(fields[2], []).append(fields[1])
    return {"kernels": sorted(set(kernels), key=kernel_sort_key), "built": built}


def parse_apt_policy(output: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """``apt-cache policy NAME...``: per package its installed and candidate versions (None
    for apt's ``(none)``). Unknown names print nothing and are absent."""
    policy: dict[str, dict[str, str | None]] = {}
    current = None
    for raw in output:
        if raw and not raw[0].isspace() and raw.rstrip().endswith(":"):
            current = policy.setdefault(raw.strip()[:-1], {"installed": None, "candidate": None})
            continue
        key, _, value = raw.strip().partition(":")
        if current is not None and key in ("Installed", "Candidate"):
            value = value.strip()
            current[key.lower()] = None if value in ("(none)", "") else value
    return policy


class RepositoryEntry(TypedDict):
    file: str
    first_line: int  # the entry's line (one-line) or its stanza's first line (deb822)
    last_line: int
    format: str  # "one-line" or "deb822"
    uris: list[str]


def parse_repository_entries(output: Iterable[str]) -> list[RepositoryEntry]:
    """Every active apt source entry, one-line and deb822 (a stanza with ``Enabled: no`` is
    not active), from ``<file>\t<line number>\t<text>`` lines."""
    entries: list[RepositoryEntry] = []
    stanza: dict = {}

    def close_stanza() -> None:
        if stanza and stanza.get("enabled", True) and stanza.get("uris"):
            entries.append(
                {
                    "file": stanza["file"],
                    "first_line": stanza["first"],
                    "last_line": stanza["last"],
                    "format": "deb822",
                    "uris": stanza["uris"],
                }
            )
        stanza.clear()

    for raw in output:
        path, number, text = (raw.split("\t", 2) + ["", ""])[:3]
        if not number.isdigit():
            continue
        line = int(number)
        blank = not text.strip()
        text = text.split("#", 1)[0].strip()
        if path.endswith(".sources"):
            # Only a blank line ends a stanza; a comment line inside one does not.
            if stanza and (stanza["file"] != path or blank):
                close_stanza()
            if not text:
                continue
            stanza.setdefault("file", path)
            stanza.setdefault("first", line)
            stanza["last"] = line
            key, _, value = text.partition(":")
            if key.strip().lower() == "uris":
                stanza["uris"] = value.split()
            elif key.strip().lower() == "enabled":
                stanza["enabled"] = value.strip().lower() not in ("no", "false", "0")
            continue
        close_stanza()
        words = re.sub(r"\[[^]]*\]", " ", text).split()
        if len(words) >= 3 and words[0] in ("deb", "deb-src"):
            entries.append(
                {
                    "file": path,
                    "first_line": line,
                    "last_line": line,
                    "format": "one-line",
                    "uris": [words[1]],
                }
            )
    close_stanza()
    return entries


def same_repository(uri: str, url: str) -> bool:
    """http and https of one address, with or without the trailing slash, are one
    repository to apt's Signed-By check."""
    return uri.split("://", 1)[-1].rstrip("/") == url.split("://", 1)[-1].rstrip("/")


class AptSourceEntry(TypedDict):
    file: str
    line: int  # 1-based line of the entry (one-line format) or of its Components: field
    format: str  # "one-line" or "deb822"
    uris: list[str]
    components: list[str]
    suites: NotRequired[list[str]]  # bookworm, bookworm-updates; stable for Grafana's


def parse_apt_source_entries(output: Iterable[str]) -> list[AptSourceEntry]:
    """Apt source files as ``<file>\\t<line number>\\t<text>`` lines: the entries that name
    components (``main`` and friends), one-line (``*.list``) and deb822 (``*.sources``).

    Flat repositories (suite ``/``, as NVIDIA's) have no components and are not listed.
    """
    entries: list[AptSourceEntry] = []
    stanza_uris: dict[str, list[str]] = {}
    stanza_suites: dict[str, list[str]] = {}
    for raw in output:
        path, number, text = (raw.split("\t", 2) + ["", ""])[:3]
        text = text.split("#", 1)[0].strip()
        if path.endswith(".sources"):
            key, _, value = text.partition(":")
            if not text:
                stanza_uris.pop(path, None)
                stanza_suites.pop(path, None)
            elif key.strip().lower() == "uris":
                stanza_uris[path] = value.split()
            elif key.strip().lower() == "suites":
                stanza_suites[path] = value.split()
            elif key.strip().lower() == "components":
                entries.append(
                    {
                        "file": path,
                        "line": int(number),
                        "format": "deb822",
                        "uris": stanza_uris.get(path, []),
                        "components": value.split(),
                        "suites": stanza_suites.get(path, []),
                    }
                )
            continue
        words = re.sub(r"\[[^]]*\]", " ", text).split()
        if len(words) >= 4 and words[0] in ("deb", "deb-src"):
            entries.append(
                {
                    "file": path,
                    "line": int(number),
                    "format": "one-line",
                    "uris": [words[1]],
                    "components": words[3:],
                    "suites": [words[2]],
                }
            )
    return entries


class MemoryInfoDict(TypedDict):
    total_kb: int
    available_kb: int


def parse_meminfo(output: Iterable[str]) -> MemoryInfoDict:
    """The MemTotal and MemAvailable lines of /proc/meminfo, in kB (available: what can be
    used without swapping, the figure a build may plan with)."""
    values = {}
    for line in output:
        key, _, rest = line.partition(":")
        values[key.strip()] = int(rest.split()[0])
    return {"total_kb": values["MemTotal"], "available_kb": values["MemAvailable"]}


def parse_iommu_state(output: Iterable[str]) -> dict:
    """/proc/cmdline then ``### iommu_groups=<count>`` as the IOMMU settings on the kernel
    command line and whether the kernel runs an IOMMU (any IOMMU group):
    ``{"cmdline": {"intel_iommu": "on", "iommu": "pt", ...}, "active": bool}``. With address
    translation on (no ``iommu=pt``), peer-to-peer traffic between GPUs is redirected through
    the root complex."""
    cmdline: dict[str, str] = {}
    groups = 0
    for line in output:
        if line.startswith("### iommu_groups="):
            groups = int(line.split("=", 1)[1] or 0)
            continue
        for word in line.split():
            key, _, value = word.partition("=")
            if key in ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough"):
                cmdline[key] = value
    return {"cmdline": cmdline, "active": groups > 0}


def iommu_passthrough(iommu: dict) -> bool:
    """DMA passes the IOMMU untranslated: ``iommu=pt`` or ``iommu.passthrough=1``."""
    cmdline = iommu["cmdline"]
    return cmdline.get("iommu") == "pt" or cmdline.get("iommu.passthrough") in ("1", "y", "on")


def parse_systemd_show(output: Iterable[str]) -> dict[str, str]:
    """``systemctl show -p ...`` as ``{property: value}`` (``KEY=value`` lines; others are
    dropped). LoadState is ``not-found`` when there is no such unit."""
    return dict(line.strip().split("=", 1) for line in output if "=" in line)


def parse_python_packages(output: Iterable[str]) -> dict[str, str]:
    """``<venv>/lib/python*/site-packages/<name>-<version>.dist-info`` paths as the installed
    distributions, ``{normalized name: version}`` (names lowercased, runs of ``-_.`` -> ``-``)."""
    packages = {}
    for line in output:
        name_version = line.strip().rsplit("/", 1)[-1].removesuffix(".dist-info")
        name, _, version = name_version.partition("-")
        if version:
            packages[re.sub(r"[-_.]+", "-", name).lower()] = version
    return packages


def parse_json_record(output: Iterable[str]) -> dict | None:
    """A JSON object a file holds (a build record: printf wrote it on one line); None when the
    file is missing, empty or not a JSON object (a cut-off write)."""
    text = "\n".join(output).strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # deep nesting: the parser's recursion, no record
        return None
    return value if isinstance(value, dict) else None


def parse_state_file(output: Iterable[str]) -> dict:
    """StateFile's output: {"present": bool, "record": the JSON object or None}. A file that
    is present with no JSON object in it (empty, cut off, not UTF-8, a list) is told apart
    from one that is not there: the first is unreadable, the second not written yet."""
    lines = list(output)
    if not lines or lines[0].strip() != "present":
        return {"present": False, "record": None}
    return {"present": True, "record": parse_json_record(lines[1:])}


def parse_python_version(output: Iterable[str]) -> str | None:
    """``X.Y.Z`` of ``python --version`` (``Python 3.12.3``); None when no line names one."""
    for line in output:
        match = re.match(r"Python (\d+\.\d+\.\d+)", line.strip())
        if match:
            return match.group(1)
    return None


def parse_file_digests(output: Iterable[str]) -> dict[str, str | None]:
    """``sha256sum`` lines (``<digest>  <path>``, or ``- <path>`` for a missing file) as
    ``{path: digest, or None when missing}``."""
    digests: dict[str, str | None] = {}
    for line in output:
        digest, _, path = line.strip().partition(" ")
        digests[path.strip().lstrip("*")] = None if digest == "-" else digest
    return digests
