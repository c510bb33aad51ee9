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


_CSV = data.nvidia_smi().query_csv
_UNREADABLE = frozenset(data.nvidia_smi().unreadable)
# A header cell: a --query-gpu field name, its unit after it in brackets ("memory.total [MiB]").
_FIELD = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?: \[[^\]]*\])?")


def smi_value(text: str) -> str | None:
    """One value as nvidia-smi printed it; None for what it could not read ([N/A], N/A,
    ERR!, [Unknown Error] ...) or an empty cell."""
    value = text.strip()
    if not value or value in _UNREADABLE or (value.startswith("[") and value.endswith("]")):
        return None
    return value


# --query-gpu field names (`nvidia-smi --help-query-gpu`) a header must name one of: other
# commands' output in a composite capture (`ls` prints `bin`, `src`; a banner a lowercase
# word) reads as a header of one unknown field otherwise. Single names are known whole; dotted
# ones by their first part (``clocks.max.sm``, ``ecc.errors.corrected.volatile.total``), so a
# field of a newer driver in a known family still reads.
_KNOWN_NAMES = frozenset(
    [
        "index",
        "count",
        "timestamp",
        "name",
        "gpu_name",
        "serial",
        "gpu_serial",
        "uuid",
        "gpu_uuid",
        "gpu_bus_id",
        "driver_version",
        "vbios_version",
        "persistence_mode",
        "display_mode",
        "display_active",
        "display_attached",
        "addressing_mode",
        "pstate",
        "compute_mode",
        "compute_cap",
        "gpu_recovery_action",
    ]
)
_KNOWN_FAMILIES = frozenset(
    [
        "pci",
        "pcie",
        "accounting",
        "driver_model",
        "inforom",
        "gom",
        "fan",
        "clocks",
        "clocks_throttle_reasons",
        "clocks_event_reasons",
        "clocks_event_reasons_counters",
        "memory",
        "utilization",
        "encoder",
        "ecc",
        "retired_pages",
        "remapped_rows",
        "temperature",
        "power",
        "enforced",
        "mig",
        "fabric",
        "protected_memory",
        "reset_status",
        "platform",
        "module",
        "c2c",
    ]
)
# What each identity column of a row holds: a row whose identity cell holds something else
# (a `### rc=0` marker, `ls` output) is no row of that header.
_IDENTITY_VALUE = {
    "index": re.compile(r"\d+"),
    "pci.bus_id": re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"),
    "uuid": re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f-]+"),
    "serial": re.compile(r"[^\s#]\S*"),
}
# Readings no GPU can give: a percentage or a power below zero (nvidia-smi prints [N/A] for
# what it cannot read, never a negative number), a utilization above 100 %. Told by the
# header's unit (kept there with `nounits` too) or the field's name.
_PERCENT_OR_POWER = ("utilization.", "power.", "enforced.power.", "fan.speed")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _known_field(name: str) -> bool:
    return name in _KNOWN_NAMES or ("." in name and name.split(".", 1)[0] in _KNOWN_FAMILIES)


def _header_cells(line: str) -> list[tuple[str, str | None]] | None:
    """(field name, unit or None) per cell of a --query-gpu CSV header line, or None."""
    stripped = line.strip()
    # Data rows start with a digit, a capital or a bracket: a cheap test first.
    if not stripped or not stripped[0].islower():
        return None
    cells = [cell.strip() for cell in stripped.split(",")]
    if not all(_FIELD.fullmatch(cell) for cell in cells):
        return None
    named = [
        (name, unit[:-1] if unit else None) for name, _, unit in (c.partition(" [") for c in cells)
    ]
    if not any(_known_field(name) for name, _ in named):
        return None  # not one nvidia-smi field: another command's output
    return named


def gpu_query_header(line: str) -> list[str] | None:
    """The field names of a --query-gpu CSV header line (units dropped: ``memory.total
    [MiB]`` -> ``memory.total``), or None when the line is not a header: every cell a field
    name, at least one of them a field nvidia-smi knows."""
    cells = _header_cells(line)
    return None if cells is None else [name for name, _ in cells]


def _checked_range(field: str, unit: str | None) -> tuple[str, float | None] | None:
    """(what the field is, its highest possible value or None) for the fields whose values
    are checked; None for the others."""
    if unit == "W" or field.startswith(("power.", "enforced.power.")):
        return "power", None
    if unit == "%" or field.startswith(_PERCENT_OR_POWER):
        return "percentage", 100.0 if field.startswith("utilization.") else None
    return None


class _Sample:
    """The rows after one header line: the last row per GPU, kept as raw cells."""

    def __init__(self, cells: list[tuple[str, str | None]]):
        self.fields = [name for name, _ in cells]
        fields = self.fields
        self.identity = next((f for f in _CSV.identity if f in fields), None)
        self.at = fields.index(self.identity) if self.identity else None
        # Every identity column, to check that they name the same GPU row after row.
        self.ids = [(f, fields.index(f)) for f in _CSV.identity if f in fields]
        self.seen: dict[tuple[str, str, str], str] = {}
        self.checked = [
            (at, name, limits)
            for at, (name, unit) in enumerate(cells)
            if (limits := _checked_range(name, unit))
        ]
        self.rows: dict[str, list[str]] = {}

    def is_row(self, cells: list[str]) -> bool:
        """``cells`` are a row of this header: as many cells, and a GPU in each identity
        column (a `### rc=0` marker or `ls` output of as many cells is not)."""
        if len(cells) != len(self.fields) or cells[0].lstrip().startswith("#"):
            return False
        return all(
            _IDENTITY_VALUE[field].fullmatch(cells[at].strip()) or smi_value(cells[at]) is None
            for field, at in self.ids
        )

    def _gpu(self, cells: list[str]) -> str:
        if self.at is None:
            return f"GPU {len(self.rows)}"  # numbered in order (see result)
        value = cells[self.at].strip()
        return f"GPU {value}" if self.identity == "index" else f"GPU {self.identity} {value}"

    def _check_identity(self, cells: list[str]) -> None:
        # index 0 on two bus ids, or one bus id on indexes 0 and 1: the same GPU twice (rows
        # of two hosts pasted together, or an edited copy), never a second sample of it.
        values = [(f, smi_value(cells[at])) for f, at in self.ids]
        values = [(f, v) for f, v in values if v is not None]
        for field, value in values:
            for other, other_value in values:
                if other == field:
                    continue
                before = self.seen.setdefault((field, value, other), other_value)
                if before != other_value:
                    raise GpuQueryError(
                        f"the same GPU twice: {field} {value} is on the rows of {other} "
                        f"{before} and {other} {other_value} (rows of two hosts pasted "
                        "together, or an edited copy?); give one host's output"
                    )

    def _check_values(self, cells: list[str]) -> None:
        for at, field, (what, highest) in self.checked:
            value = smi_value(cells[at])
            number = _NUMBER.match(value) if value else None
            if number is None:
                continue  # not a number: the judges report it as unread
            reading = float(number.group())
            if reading < 0 or (highest is not None and reading > highest):
                bound = "cannot be negative" if reading < 0 else f"cannot exceed {highest:g}"
                raise GpuQueryError(
                    f"{self._gpu(cells)}: {field} reads {value!r}: "
                    f"a {what} {bound}; nvidia-smi never prints that (an edited or corrupt "
                    "copy?)"
                )

    def add(self, cells: list[str]) -> None:
        self._check_identity(cells)
        self._check_values(cells)
        if self.at is not None:
            self.rows[cells[self.at].strip()] = cells
            return
        if len(self.rows) >= _CSV.max_gpus_without_identity:
            names = ", ".join(_CSV.identity)
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
    per row. ``keep``: how many of the latest samples to keep (None: all). A header line names
    at least one field nvidia-smi knows; lines that are not rows of the current header
    (command lines, other output, a cell where the GPU's index or bus id goes holding neither)
    are skipped, so other commands' output in one capture file is never read as GPUs.
    Raises GpuQueryError for rows that cannot be told apart, one GPU named twice (an index on
    two bus ids, a bus id on two indexes), or a reading no GPU gives (a negative percentage or
    power, a utilization above 100 %). Unreadable values ([N/A], [Not Supported], ERR!)
    become None; a field missing from the header is no key.
    """
    samples: list[list[dict[str, str | None]]] = []
    sample: _Sample | None = None
    for line in lines:
        header = _header_cells(line)
        if header is not None:
            if sample is not None:
                samples.append(sample.result())
                if keep:
                    del samples[:-keep]
            sample = _Sample(header)
            continue
        if sample is not None:
            cells = line.split(",")
            if sample.is_row(cells):
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


CLOCK_REASONS_MARK = "### clock reasons"


def parse_gpu_query_under_load(output: Iterable[str]) -> dict:
    """What the sampled load (pyinfra_sglang/audit/gpu_load.py) prints: ``### load rc=<rc>``,
    the load's output, ``### samples``, then the ``--query-gpu`` samples taken while the load ran.

    ``{"load_rc": int, "load_output": [lines], "samples": [[gpu rows], ...]}``, empty samples
    dropped (none without nvidia-smi). When the markers are missing the wrapper itself failed
    (no temporary folder, say) and nothing ran: ``load_rc`` None, every line in ``load_output``.
    """
    lines = list(output)
    # Outputs recorded before the clock event reasons end with the samples.
    reasons: list[list[dict[str, str | None]]] = []
    if CLOCK_REASONS_MARK in (line.rstrip("\r\n") for line in lines):
        at = max(i for i, line in enumerate(lines) if line.rstrip("\r\n") == CLOCK_REASONS_MARK)
        reasons = [s for s in parse_gpu_query_samples(lines[at + 1 :]) if s]
        lines = lines[:at]
    marks = [i for i, line in enumerate(lines) if line.startswith("### ")]
    if len(marks) < 2 or not lines[marks[0]].startswith("### load rc="):
        # The wrapper itself failed (no temporary folder, say): nothing ran.
        return {"load_rc": None, "load_output": lines, "samples": [], "clock_reasons": []}
    load_at, samples_at = marks[0], marks[-1]
    return {
        "load_rc": int(lines[load_at].rsplit("=", 1)[1]),
        "load_output": lines[load_at + 1 : samples_at],
        "samples": [s for s in parse_gpu_query_samples(lines[samples_at + 1 :]) if s],
        "clock_reasons": reasons,
    }


# The underline escapes `nvidia-smi` prints around headers.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# `nvidia-smi -q` paths of the fields shared with --query-gpu (data/nvidia_smi.toml).
_SMI_Q_FIELDS = dict(data.nvidia_smi().smi_q.fields)
_SMI_Q_PATHS = {path: key for key, path in _SMI_Q_FIELDS.items()}
# A GPU's own line in `nvidia-smi -q`: its section follows.
SMI_Q_GPU_LINE = re.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")


def parse_smi_q(lines: Iterable[str]) -> list[dict[str, str | None]]:
    """``nvidia-smi -q`` as the rows parse_gpu_query_csv gives (the fields it shares with
    GPU_QUERY_FIELDS; widths without their ``x``; N/A, ERR! and the like -> None), one per
    GPU in order. Read as it streams, keeping only those fields; indentation is taken
    relative to each GPU's line, so a pasted copy indented as a whole reads the same. Raises
    GpuQueryError for a GPU whose section comes twice."""
    driver = None
    rows: list[dict[str, str | None]] = []
    base = 0
    path: list[str] = []
    sections: set[str] = set()  # the GPU lines seen: a GPU's section twice is refused
    for raw in lines:
        line = ANSI_ESCAPE.sub("", raw.rstrip("\r\n"))
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if SMI_Q_GPU_LINE.fullmatch(stripped):
            if stripped in sections:
                raise GpuQueryError(
                    f"{stripped} appears twice: one GPU's section given twice (two "
                    "`nvidia-smi -q` outputs pasted together?); give one output"
                )
            sections.add(stripped)
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
