"""Parsers of what an operator reads first for a GPU's health: the kernel log's Xid lines,
``nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`` and ``nvidia-smi nvlink -e``. Tested on
real captures (tests/fixtures/gpu/h200-health/, tests/fixtures/gpu/public/)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypedDict

from pyinfra_sglang import data
from pyinfra_sglang.parsers.nvidia_smi import smi_value


class XidEvent(TypedDict):
    pci: str  # "0000:3b:00": domain, bus, device as the kernel prints it
    xid: int
    detail: str  # the rest of the line after the Xid number


# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." in dmesg (with or
# without -T) and journalctl -k; older drivers print "(0000:01:00)", MIG adds " GPU-I:05".
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\):\s*"
    r"(?P<xid>\d+)\s*,?\s*(?P<detail>.*)"
)


def parse_xid_lines(lines: Iterable[str]) -> list[XidEvent]:
    """Every Xid line of a kernel log (``dmesg``, ``dmesg -T``, ``journalctl -k``), oldest
    first; other lines are skipped."""
    events: list[XidEvent] = []
    for line in lines:
        found = _XID.search(line)
        if found:
            detail = found["detail"].strip()
            events.append(
                {"pci": pci_key(found["pci"]), "xid": int(found["xid"]), "detail": detail}
            )
    return events


# dmesg --color=always and journalctl's colors: CSI sequences, stripped before reading.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A line of a kernel log: dmesg's "[  12.345678]" or dmesg -T's "[Sun Feb 23 ...]" stamp,
# journalctl -k's "HOST kernel:", or the driver's own "NVRM:" text.
_KERNEL_LINE = re.compile(r"^\s*\[[^\]]+\]\s|(?:^|\s)kernel:\s|NVRM:")


class KernelLogError(ValueError):
    """Input given as a kernel log that is none: its message says what it is instead."""


def kernel_log_lines(lines: Iterable[str]) -> list[str]:
    """The lines of a kernel log given as text, color escapes stripped. KernelLogError for
    an empty input, one that is not text (gzip, UTF-16, binary: NUL bytes or bytes that are
    not UTF-8, read as U+FFFD), and one with no line shaped like a kernel log's."""
    read = [_ANSI.sub("", line) for line in lines]
    text = [line for line in read if line.strip()]
    if not text:
        raise KernelLogError("empty: no line was read, so no Xid could be looked for")
    head = "".join(text[:50])
    if "\x00" in head or "\ufffd" in head:
        raise KernelLogError(
            "not a text kernel log: it holds NUL bytes or bytes that are not UTF-8 (a gzipped, "
            "UTF-16 or binary file?); give `dmesg` or `journalctl -k -b` output as plain text "
            "(zcat or iconv it first)"
        )
    if not any(_KERNEL_LINE.search(line) for line in text):
        raise KernelLogError(
            f"no line of its {len(text)} looks like a kernel log's (dmesg's [seconds] stamps, "
            "journalctl -k's 'HOST kernel:', the driver's 'NVRM:'): give `dmesg` or "
            "`journalctl -k -b` output"
        )
    return read


# dmesg's "[  12.345678]" (seconds since boot); journalctl's short-iso stamp and its
# default "Dec 06 05:00:01" (or syslog's) at the start of a line.
_DMESG_STAMP = re.compile(r"^\s*\[\s*(?P<s>\d+\.\d+)\]")
_ISO_STAMP = re.compile(
    r"^(?P<t>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\s"
)
_SYSLOG_STAMP = re.compile(r"^(?P<t>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})\s")


def log_coverage(first_line: str, lines: int, source: str) -> str:
    """What a kernel log read covers, in words: its source, from when (the first line's
    stamp) and how many lines. dmesg's ring buffer drops its oldest lines when full: a first
    stamp past boot says so."""
    count = f"{lines:,} line{'s' if lines != 1 else ''}"
    where = {
        "journald": "journald's kernel messages of this boot",
        "dmesg": "the kernel's ring buffer (dmesg)",
    }.get(source, "the kernel log given")
    dmesg = _DMESG_STAMP.match(first_line)
    if dmesg:
        seconds = float(dmesg["s"])
        since = (
            "from boot"
            if seconds < 60
            else f"from {seconds:,.0f} s after boot (older lines were dropped before it)"
        )
        return f"{where}, {since}, {count}"
    stamp = _ISO_STAMP.match(first_line) or _SYSLOG_STAMP.match(first_line)
    if stamp:
        return f"{where}, since {stamp['t']}, {count}"
    return f"{where}, {count} (its first line has no time stamp)"


def pci_key(address: str) -> str:
    """A PCI address as the kernel's Xid lines name a GPU ("0000:3b:00"): nvidia-smi's
    "00000000:3B:00.0" and the kernel's "0000:3b:00" give the same key."""
    domain, bus, rest = address.strip().lower().split(":", 2)
    return f"{domain[-4:].rjust(4, '0')}:{bus}:{rest.split('.', 1)[0]}"


_GPU = re.compile(r"GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")


def _number_or_flag(value: str | None) -> int | bool | None:
    if value is None:
        return None
    if value in ("Yes", "No"):
        return value == "Yes"
    number = value.split()[0]
    return int(number) if number.isdigit() else None


def parse_health_q(lines: Iterable[str]) -> list[dict]:
    """Per GPU of ``nvidia-smi -q`` (whole or ``-d ECC,ROW_REMAPPER,PAGE_RETIREMENT``), in
    order: ``{"pci", field: value}`` for the fields of data/gpu_health.toml ``[smi_q]``:
    counts as int, Yes/No as bool, None where not printed or not read (N/A). A field of
    several paths adds up the numbers read."""
    paths = {
        tuple(path): field
        for field, field_paths in data.gpu_health().smi_q.items()
        for path in field_paths
    }
    sections = {path[0] for path in paths}
    gpus: list[dict] = []
    base = 0
    path: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        gpu = _GPU.fullmatch(stripped)
        if gpu:
            gpus.append({"pci": gpu["pci"], **dict.fromkeys(data.gpu_health().smi_q)})
            base, path = indent, []
            continue
        if not stripped:
            continue
        if not gpus:  # a section pasted without its GPU line: GPU 0, read from its indent
            if stripped not in sections:
                continue
            gpus.append({"pci": None, **dict.fromkeys(data.gpu_health().smi_q)})
            base, path = indent - 4, []
        key, colon, value = stripped.partition(":")
        depth = (indent - base) // 4
        if depth < 1:
            continue
        path = path[: depth - 1] + [key.strip()]
        field = paths.get(tuple(path)) if colon else None
        if not field:
            continue
        read = _number_or_flag(smi_value(value))
        if read is None:
            continue
        current = gpus[-1][field]
        if isinstance(read, bool):
            gpus[-1][field] = bool(current) or read
        else:
            gpus[-1][field] = read + (current or 0)
    return gpus


_NVLINK_GPU = re.compile(r"GPU (?P<index>\d+):")
_NVLINK_COUNTER = re.compile(r"Link (?P<link>\d+): (?P<name>[^:]+): (?P<value>\d+)\s*$")


def parse_nvlink_errors(lines: Iterable[str]) -> dict[str, dict[str, dict[str, int]]]:
    """``nvidia-smi nvlink -e``: {GPU index: {link: {counter (lower case): count}}} for the
    error counters of data/gpu_health.toml ``[nvlink]``. Empty for a host without links (the
    command prints nothing). Lines in other shapes (a summary someone typed) are skipped."""
    counters = set(data.gpu_health().nvlink.error_counters)
    result: dict[str, dict[str, dict[str, int]]] = {}
    gpu: str | None = None
    for line in lines:
        stripped = line.strip()
        head = _NVLINK_GPU.match(stripped)
        if head:
            gpu = head["index"]
            result.setdefault(gpu, {})
            continue
        found = _NVLINK_COUNTER.match(stripped)
        if gpu is None or not found or found["name"].strip().lower() not in counters:
            continue
        link = result[gpu].setdefault(found["link"], {})
        link[found["name"].strip().lower()] = int(found["value"])
    return result
