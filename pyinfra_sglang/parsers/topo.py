"""Parsers of `nvidia-smi topo -m` and `topo -p2p r|w|n|a|p` matrices, alone or pasted
together in one file.

Each prints a matrix: a header naming the devices (GPU0, GPU1, ..., then NICs such as NIC0
or mlx5_0), CPU/NUMA affinity columns, then rows and a legend. The header carries ANSI
underline escapes; columns are tab- or space-separated; pasted copies may be indented (a
pager, a quote). A file can hold several matrices: each header line starts one, and a
matrix is told by the command line before it (`nvidia-smi topo -p2p r`) or else by its cells
(data/nvidia_smi.toml), so the P2P matrix never overwrites the topology one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyinfra_sglang import data

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_NAME = re.compile(r"GPU\d+")
_DEVICE_NAME = re.compile(r"[A-Za-z][\w.-]*\d")  # GPU0, NIC1, mlx5_0; not "CPU", "Affinity"
# "nvidia-smi topo -m", "topo --matrix", "topo -p2p r", "topo --p2pstatus n"
_COMMAND = re.compile(
    r"\btopo\s+(?:(?P<matrix>-m|--matrix)|(?:-p2p|--p2pstatus)\s+(?P<p2p>[rwnap]))\b"
)
_TOPO = data.nvidia_smi().topo
_TOPOLOGY_CELL = re.compile("|".join(_TOPO.topology_cells))
_P2P_CELL = re.compile("|".join(_TOPO.p2p_cells))
_ANY_CELL = re.compile(f"{_TOPOLOGY_CELL.pattern}|{_P2P_CELL.pattern}")

Matrix = dict[str, dict[str, str]]


class TopoError(ValueError):
    """A file whose matrices cannot be told apart, or that names a GPU twice in one."""


class TopoFile:
    """The matrices of one file, read as it streams: the last topology matrix, the last P2P
    matrix per mode its command line named, and the last P2P matrix no command line named
    (with whether such matrices differed: then none of them can stand for a given mode)."""

    def __init__(self) -> None:
        self.topology: Matrix = {}
        self.p2p_named: dict[str, Matrix] = {}
        self.p2p_unnamed: Matrix = {}
        self.p2p_unnamed_differ = False
        self.matrices = 0

    def add(self, kind: str | None, mode: str | None, matrix: Matrix) -> None:
        self.matrices += 1
        # A single GPU's matrix holds only "X": it stands for either kind.
        if kind in ("topology", None):
            self.topology = matrix
        if kind in ("p2p", None):
            if mode:
                self.p2p_named[mode] = matrix
            else:
                if self.p2p_unnamed and self.p2p_unnamed != matrix:
                    self.p2p_unnamed_differ = True
                self.p2p_unnamed = matrix

    def p2p(self, mode: str = "r") -> Matrix:
        """The P2P matrix of ``mode``: the one its command line names, else the one no
        command line names; {} when there is none."""
        if mode in self.p2p_named:
            return self.p2p_named[mode]
        if self.p2p_unnamed_differ:
            raise TopoError(
                f"expected one `nvidia-smi topo -p2p {mode}` matrix; found several P2P matrices "
                f"that differ and no command line naming which is `-p2p {mode}` (keep the "
                "`nvidia-smi topo -p2p ...` line above each matrix)"
            )
        return self.p2p_unnamed


def _shown(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return repr(line[:width] + ("..." if len(line) > width else ""))


def _is_header(tokens: list[str]) -> bool:
    # A header names GPU0 then more devices or the affinity columns; GPU0's row has its
    # cell against GPU0 ("X") second.
    return tokens[0] == "GPU0" and (len(tokens) == 1 or not _ANY_CELL.fullmatch(tokens[1]))


def _kind(matrix: Matrix) -> str | None:
    cells = {cell for row, cells in matrix.items() for col, cell in cells.items() if row != col}
    if not cells:
        return None
    return "p2p" if all(_P2P_CELL.fullmatch(cell) for cell in cells) else "topology"


def read_topo(lines: Iterable[str]) -> TopoFile:
    """Every matrix of a file (GPU rows and columns only: NIC rows and columns, affinity
    columns, legends and other lines dropped), split by header lines. A command line
    (``nvidia-smi topo -m``, ``topo -p2p n``) names the matrix that follows it; a matrix
    without one is told by its cells. Raises TopoError for a device named twice in a header
    or a GPU's row twice under one header."""
    found = TopoFile()
    named: tuple[str | None, str | None] = (None, None)  # for the next header
    label = named
    columns: list[str] | None = None
    matrix: Matrix = {}
    for line in lines:
        text = _ANSI.sub("", line)
        command = _COMMAND.search(text)
        if command:
            named = ("topology", None) if command["matrix"] else ("p2p", command["p2p"])
            continue
        tokens = text.split()
        if not tokens or not _GPU_NAME.fullmatch(tokens[0]):
            continue  # blank, legend, NIC row, prompt, comment
        if _is_header(tokens):
            if matrix:
                found.add(label[0] or _kind(matrix), label[1], matrix)
            label, named = named, (None, None)
            columns, matrix = [], {}
            for token in tokens:
                if not _DEVICE_NAME.fullmatch(token):
                    break  # affinity columns follow the devices
                if token in columns:
                    raise TopoError(f"{token} twice in one header line: {_shown(text)}")
                columns.append(token)
            continue
        if columns is None:
            continue  # rows without their header (a cut paste): their columns are unknown
        if tokens[0] in matrix:
            # Another matrix pasted without its header, or an edited copy: its rows would
            # overwrite this one's, mixing two readings of the same GPU.
            raise TopoError(
                f"{tokens[0]}'s row appears twice under one header line (a matrix pasted "
                "without its header line, or an edited copy?); keep each matrix's header"
            )
        matrix[tokens[0]] = {
            column: cell for column, cell in zip(columns, tokens[1:]) if _GPU_NAME.fullmatch(column)
        }
    if matrix:
        found.add(label[0] or _kind(matrix), label[1], matrix)
    return found


def parse_topo_matrix(lines: Iterable[str]) -> Matrix:
    """``nvidia-smi topo -m`` as ``{"GPU0": {"GPU0": "X", "GPU1": "NV18"}, ...}``: GPU rows
    and columns only; the topology matrix of a file that also holds P2P ones; {} for none."""
    return read_topo(lines).topology


def parse_topo_p2p(lines: Iterable[str], mode: str = "r") -> Matrix:
    """``nvidia-smi topo -p2p r|w|n|a|p`` as ``{"GPU0": {"GPU0": "X", "GPU1": "OK"}, ...}``
    (cells OK, CNS, GNS, TNS, NS, U); the ``mode`` matrix of a file that holds several
    (see TopoFile.p2p); {} for none."""
    return read_topo(lines).p2p(mode)


def topology_has_nvlink(matrix: Matrix) -> bool:
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


def widest_pcie_path(matrix: Matrix) -> str | None:
    """The widest PCIe path between two different GPUs of a topo -m matrix (e.g. SYS); None
    when no pair is joined over PCIe alone (NVLink everywhere, one GPU, no matrix)."""
    found = [
        PCIE_PATHS.index(cell)
        for row, cells in matrix.items()
        for column, cell in cells.items()
        if row != column and cell in PCIE_PATHS
    ]
    return PCIE_PATHS[max(found)] if found else None
