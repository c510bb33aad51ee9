"""Parsers of what nvidia-smi, /proc/driver/nvidia/version and nvcc print."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple, TypedDict

from pyinfra_sglang import data

# One query for everything the roles and checks read per GPU; the same command as the
# shared captures, so the test double replays it verbatim.
GPU_QUERY_FIELDS = (
    "index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
    "persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm"
)


class GpuQueryError(ValueError):
    """A --query-gpu CSV whose rows cannot be told apart (see data/nvidia_smi.toml)."""


_CSV = data.load("nvidia_smi")["query_csv"]
_UNREADABLE = frozenset(data.load("nvidia_smi")["unreadable"])
# A header cell: a --query-gpu field name, its unit after it in brackets ("memory.total [MiB]").
_FIELD = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?: \[[^\]]*\])?")


def smi_value(text: str) -> str | None:
    """One value as nvidia-smi printed it; None for what it could not read ([N/A], N/A,
    ERR!, [Unknown Error] ...) or an empty cell."""
    value = text.strip()
    if not value or value in _UNREADABLE or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def gpu_query_header(line: str) -> list[str] | None:
    """The field names of a --query-gpu CSV header line (units dropped: ``memory.total
    [MiB]`` -> ``memory.total``), or None when the line is not a header."""
    stripped = line.strip()
    # Data rows start with a digit, a capital or a bracket: a cheap test first.
    if not stripped or not stripped[0].islower():
        return None
    cells = [cell.strip() for cell in stripped.split(",")]
    if not all(_FIELD.fullmatch(cell) for cell in cells):
        return None
    return [cell.split(" [", 1)[0] for cell in cells]


class _Sample:
    """The rows after one header line: the last row per GPU, kept as raw cells."""

    def __init__(self, fields: list[str]):
        self.fields = fields
        self.identity = next((f for f in _CSV["identity"] if f in fields), None)
        self.at = fields.index(self.identity) if self.identity else None
        self.rows: dict[str, list[str]] = {}

    def add(self, cells: list[str]) -> None:
        if self.at is not None:
            self.rows[cells[self.at].strip()] = cells
            return
        if len(self.rows) >= _CSV["max_gpus_without_identity"]:
            names = ", ".join(_CSV["identity"])
            raise GpuQueryError(
                f"more than {len(self.rows)} rows after one header and no column naming the "
                f"GPU ({names}): samples cannot be told from GPUs. Add index to --query-gpu."
            )
        self.rows[str(len(self.rows))] = cells

    def result(self) -> list[dict[str, str | None]]:
        rows = []
        for position, cells in enumerate(self.rows.values()):
            row = {key: smi_value(value) for key, value in zip(self.fields, cells)}
            # Without an index column, nvidia-smi's own order (PCI bus order) numbers the GPUs.
            row.setdefault("index", str(position))
            rows.append(row)
        return rows


class GpuQueryCsv(NamedTuple):
    samples: list[list[dict[str, str | None]]]  # one per header line, oldest first
    fields: list[str]  # the last header's field names ([] without a header)


def read_gpu_query_csv(lines: Iterable[str], keep: int | None = None) -> GpuQueryCsv:
    """An ``nvidia-smi --query-gpu=... --format=csv`` output, read as it streams: any fields
    in any order, with or without units (``nounits``), keyed by the header's field names.

    Each header line starts a sample; within a sample the last row per GPU (by index,
    pci.bus_id or uuid) stands, so ``-l 1`` output of any length takes memory per GPU, not
    per row. ``keep``: how many of the latest samples to keep (None: all). Lines that are not
    rows of the current header (command lines, other output) are skipped. Unreadable values
    ([N/A], [Not Supported], ERR!) become None; a field missing from the header is no key.
    """
    samples: list[list[dict[str, str | None]]] = []
    sample: _Sample | None = None
    for line in lines:
        fields = gpu_query_header(line)
        if fields is not None:
            if sample is not None:
                samples.append(sample.result())
                if keep:
                    del samples[:-keep]
            sample = _Sample(fields)
            continue
        if sample is not None:
            cells = line.split(",")
            if len(cells) == len(sample.fields):
                sample.add(cells)
    if sample is None:
        return GpuQueryCsv([], [])
    samples.append(sample.result())
    if keep:
        del samples[:-keep]
    return GpuQueryCsv(samples, sample.fields)


def parse_gpu_query_csv(lines: Iterable[str]) -> list[dict[str, str | None]]:
    """Rows of an ``nvidia-smi --query-gpu=... --format=csv`` output, keyed by field name
    (see read_gpu_query_csv): the last sample's, one per GPU. No output (no working driver)
    or no header yields []."""
    samples = read_gpu_query_csv(lines, keep=1).samples
    return samples[-1] if samples else []


def parse_gpu_query_samples(lines: Iterable[str]) -> list[list[dict[str, str | None]]]:
    """Every sample of a ``--query-gpu`` output that was printed several times (one header
    line per sample), oldest first."""
    return read_gpu_query_csv(lines).samples


def parse_gpu_query_under_load(output: Iterable[str]) -> dict:
    """What the GpuQueryUnderLoad fact's wrapper prints: ``### load rc=<rc>``, the load's
    output, ``### samples``, then the ``--query-gpu`` samples taken while the load ran.

    ``{"load_rc": int, "load_output": [lines], "samples": [[gpu rows], ...]}``, empty samples
    dropped (none without nvidia-smi). When the markers are missing the wrapper itself failed
    (no temporary folder, say) and nothing ran: ``load_rc`` None, every line in ``load_output``.
    """
    lines = list(output)
    marks = [i for i, line in enumerate(lines) if line.startswith("### ")]
    if len(marks) < 2 or not lines[marks[0]].startswith("### load rc="):
        # The wrapper itself failed (no temporary folder, say): nothing ran.
        return {"load_rc": None, "load_output": lines, "samples": []}
    load_at, samples_at = marks[0], marks[-1]
    return {
        "load_rc": int(lines[load_at].rsplit("=", 1)[1]),
        "load_output": lines[load_at + 1 : samples_at],
        "samples": [s for s in parse_gpu_query_samples(lines[samples_at + 1 :]) if s],
    }


# The underline escapes `nvidia-smi` prints around headers.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# `nvidia-smi -q` paths of the fields shared with --query-gpu (data/nvidia_smi.toml).
_SMI_Q_FIELDS = {
    key: tuple(path) for key, path in data.load("nvidia_smi")["smi_q"]["fields"].items()
}
_SMI_Q_PATHS = {path: key for key, path in _SMI_Q_FIELDS.items()}
_SMI_Q_GPU = re.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")


def parse_smi_q(lines: Iterable[str]) -> list[dict[str, str | None]]:
    """``nvidia-smi -q`` as the rows parse_gpu_query_csv gives (the fields it shares with
    GPU_QUERY_FIELDS; widths without their ``x``; N/A, ERR! and the like -> None), one per
    GPU in order. Read as it streams, keeping only those fields; indentation is taken
    relative to each GPU's line, so a pasted copy indented as a whole reads the same."""
    driver = None
    rows: list[dict[str, str | None]] = []
    base = 0
    path: list[str] = []
    for raw in lines:
        line = _ANSI.sub("", raw.rstrip("\r\n"))
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if _SMI_Q_GPU.fullmatch(stripped):
            rows.append({"index": str(len(rows)), "driver_version": driver})
            rows[-1].update(dict.fromkeys(_SMI_Q_FIELDS))
            base, path = indent, []
            continue
        key, colon, value = stripped.partition(":")
        key = key.strip()
        if not rows:
            if key == "Driver Version":
                driver = smi_value(value)
            continue
        depth = (indent - base) // 4  # nvidia-smi indents by 4
        if not key or depth < 1:
            continue
        path = path[: depth - 1] + [key]
        field = _SMI_Q_PATHS.get(tuple(path)) if colon else None
        if field:
            rows[-1][field] = smi_value(value)
    for row in rows:
        for key in ("pcie.link.width.current", "pcie.link.width.max"):
            row[key] = row[key].removesuffix("x") if row[key] else None
    return rows


# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
_NVRM = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\b(?P<banner>.*?)\s(?P<version>\d+\.\d+(?:\.\d+)?)\s"
)


class NvidiaLoadedModuleDict(TypedDict):
    version: str
    flavor: str  # "open" or "proprietary"


def parse_loaded_module(output: Iterable[str]) -> NvidiaLoadedModuleDict | None:
    """/proc/driver/nvidia/version's ``NVRM version:`` line as the loaded module's version and
    flavor (``open`` for the Open Kernel Module, else ``proprietary``); None when there is no
    such line (no NVIDIA module loaded)."""
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


def parse_nvcc_release(output: Iterable[str]) -> NvccReleaseDict | None:
    """``nvcc --version`` as its release (``13.1``) and full version (``13.1.80``); None when
    no line names them (no nvcc)."""
    for line in output:
        match = _NVCC_RELEASE.search(line)
        if match:
            return {"release": match["release"], "version": match["version"]}
    return None
