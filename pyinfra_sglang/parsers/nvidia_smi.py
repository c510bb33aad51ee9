"""Parsers of what nvidia-smi, /proc/driver/nvidia/version and nvcc print."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypedDict

# One query for everything the roles and checks read per GPU; the same command as the
# shared captures, so the test double replays it verbatim.
GPU_QUERY_FIELDS = (
    "index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
    "persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm"
)


def parse_gpu_query_csv(lines: list[str]) -> list[dict[str, str | None]]:
    """Rows of an ``nvidia-smi --query-gpu=... --format=csv`` output, keyed by field name
    (units dropped from the header: ``memory.total [MiB]`` -> ``memory.total``).

    ``[N/A]`` and ``[Not Supported]`` become None. A file holding several samples (several
    header lines) yields the last sample only. No output (no working driver) yields [].
    """
    rows: list[dict[str, str | None]] = []
    header: list[str] | None = None
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if cells and cells[0] == "index":
            header = [cell.split(" [", 1)[0] for cell in cells]
            rows = []
        elif header and len(cells) == len(header):
            rows.append(
                {
                    key: (None if value.startswith("[") else value)
                    for key, value in zip(header, cells)
                }
            )
    return rows


def parse_gpu_query_samples(lines: list[str]) -> list[list[dict[str, str | None]]]:
    """Every sample of a ``--query-gpu`` output that was printed several times (one header
    line per sample), oldest first."""
    samples: list[list[str]] = []
    for line in lines:
        if line.split(",", 1)[0].strip() == "index":
            samples.append([])
        if samples:
            samples[-1].append(line)
    return [parse_gpu_query_csv(sample) for sample in samples]


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


# `nvidia-smi topo -m` and `topo -p2p <mode>` print a matrix: a header naming the devices
# (GPU0, GPU1, ..., then NICs such as NIC0 or mlx5_0), then CPU/NUMA affinity columns and a
# legend. The header carries ANSI underline escapes; columns are tab- or space-separated.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_NAME = re.compile(r"^GPU\d+$")
_DEVICE_NAME = re.compile(r"^[A-Za-z][\w.-]*\d$")  # GPU0, NIC1, mlx5_0; not "CPU", "Affinity"


def _parse_topo_grid(lines) -> dict[str, dict[str, str]]:
    """{row GPU: {column GPU: cell}} of a topo matrix, GPU rows and columns only."""
    columns: list[str] | None = None
    matrix: dict[str, dict[str, str]] = {}
    for line in lines:
        tokens = _ANSI.sub("", line).split()
        if not tokens or not _GPU_NAME.match(tokens[0]):
            continue  # blank, legend, NIC row, command line, comment
        if columns is None:
            columns = []
            for token in tokens:
                if not _DEVICE_NAME.match(token):
                    break  # affinity columns follow the devices
                columns.append(token)
            continue
        matrix[tokens[0]] = {
            column: cell for column, cell in zip(columns, tokens[1:]) if _GPU_NAME.match(column)
        }
    return matrix


def parse_topo_matrix(lines) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m`` as ``{"GPU0": {"GPU0": "X", "GPU1": "NV18"}, ...}``: GPU rows
    and columns only (NICs, affinity columns and the legend are dropped); {} for no output."""
    return _parse_topo_grid(lines)


def parse_topo_p2p(lines) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -p2p r|w|n|a|p`` as ``{"GPU0": {"GPU0": "X", "GPU1": "OK"}, ...}``
    (cells OK, CNS, GNS, TNS, NS, U); the legend is dropped; {} for no output."""
    return _parse_topo_grid(lines)


def topology_has_nvlink(matrix: dict[str, dict[str, str]]) -> bool:
    """True when any two different GPUs of a topo -m matrix are joined by NVLink (``NV<n>``)."""
    return any(
        row != column and re.fullmatch(r"NV\d+", cell)
        for row, cells in matrix.items()
        for column, cell in cells.items()
    )


# PCIe path kinds of `nvidia-smi topo -m`, narrowest first (its legend: PIX at most one
# bridge, PXB several bridges, PHB a host bridge, NODE between host bridges of one NUMA node,
# SYS across NUMA nodes).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def widest_pcie_path(matrix: dict[str, dict[str, str]]) -> str | None:
    """The widest PCIe path between two different GPUs of a topo -m matrix (e.g. SYS); None
    when no pair is joined over PCIe alone (NVLink everywhere, one GPU, no matrix)."""
    found = [
        PCIE_PATHS.index(cell)
        for row, cells in matrix.items()
        for column, cell in cells.items()
        if row != column and cell in PCIE_PATHS
    ]
    return PCIE_PATHS[max(found)] if found else None


# `nvidia-smi -q` fields that map onto --query-gpu names, as paths of indented section names.
_SMI_Q_FIELDS = {
    "name": ("Product Name",),
    "pci.bus_id": ("PCI", "Bus Id"),
    "pcie.link.gen.current": ("PCI", "GPU Link Info", "PCIe Generation", "Current"),
    "pcie.link.gen.max": ("PCI", "GPU Link Info", "PCIe Generation", "Max"),
    "pcie.link.gen.gpumax": ("PCI", "GPU Link Info", "PCIe Generation", "Device Max"),
    "pcie.link.gen.hostmax": ("PCI", "GPU Link Info", "PCIe Generation", "Host Max"),
    "pcie.link.width.current": ("PCI", "GPU Link Info", "Link Width", "Current"),
    "pcie.link.width.max": ("PCI", "GPU Link Info", "Link Width", "Max"),
    "persistence_mode": ("Persistence Mode",),
    "memory.total": ("FB Memory Usage", "Total"),
}


def parse_smi_q(lines) -> list[dict[str, str | None]]:
    """``nvidia-smi -q`` as the rows parse_gpu_query_csv gives (the fields it shares with
    GPU_QUERY_FIELDS; widths without their ``x``; N/A -> None), one per GPU in order."""
    driver = None
    sections: list[dict[tuple[str, ...], str | None]] = []  # one {path: value} per GPU
    path: list[str] = []
    for raw in lines:
        line = _ANSI.sub("", raw.rstrip("\n"))
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", line):
            sections.append({})
            continue
        key, colon, value = line.strip().partition(":")
        depth = (len(line) - len(line.lstrip(" "))) // 4  # nvidia-smi indents by 4
        if not key or depth == 0:
            if key.strip() == "Driver Version":
                driver = value.strip()
            continue
        if not sections:
            continue
        path = path[: depth - 1] + [key.strip()]
        if colon:
            sections[-1][tuple(path)] = None if value.strip() in ("N/A", "") else value.strip()
    rows = []
    for index, values in enumerate(sections):
        row = {key: values.get(fields) for key, fields in _SMI_Q_FIELDS.items()}
        for key in ("pcie.link.width.current", "pcie.link.width.max"):
            row[key] = row[key].removesuffix("x") if row[key] else None
        rows.append({"index": str(index), "driver_version": driver, **row})
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
