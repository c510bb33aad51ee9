"""`pyinfra-sglang analyze`: the audit's parsers and checks on captured files, for hosts you
cannot reach (a pasted `nvidia-smi topo -m`, a `--query-gpu` CSV, an `nvidia-smi -q`)."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from pyinfra_sglang.audit.drift import findings_for_persistence
from pyinfra_sglang.audit.fabric import findings_for_fabric_state
from pyinfra_sglang.audit.findings import Finding, worst_level
from pyinfra_sglang.audit.health import findings_for_gpu_health
from pyinfra_sglang.audit.links import findings_for_links, pcie_links
from pyinfra_sglang.audit.report import format_table
from pyinfra_sglang.audit.topology import findings_for_p2p, findings_for_topology, p2p_all_ok
from pyinfra_sglang.driver.fabric import parse_fabric_sections
from pyinfra_sglang.parsers.gpu_health import (
    KernelLogError,
    kernel_log_lines,
    log_coverage,
    parse_health_q,
    parse_xid_lines,
)
from pyinfra_sglang.parsers.nvidia_smi import (
    ANSI_ESCAPE,
    SMI_Q_GPU_LINE,
    GpuQueryError,
    parse_smi_q,
    read_gpu_query_csv,
)
from pyinfra_sglang.parsers.topo import TopoError, read_topo, topology_has_nvlink

# A line longer than this is cut (the rest skipped): a binary or one-line file of any size
# takes bounded memory.
MAX_LINE = 64 * 1024
SHOWN = 60  # characters of a file's first line an error shows
# The most bytes read from one input; beyond it the file is refused (a device such as
# /dev/zero, a FIFO or a file that grows has no end, and its lines stream through the
# parsers, so without a cap `analyze` would never end). Far above what nvidia-smi prints:
# - a --query-gpu CSV can be an `-l 1` stream: the audit's query is ~200 bytes a GPU, so
#   64 MiB holds about 11 hours of 8 GPUs sampled every second;
# - `topo -m`/`-p2p` matrices are a few KiB, and the full `nvidia-smi -q` of 8 GPUs is
#   ~110 KiB (tests/fixtures/gpu/smiq_8x_rtxpro6000_server_driver595_full.txt): 4 MiB
#   holds more than 36 times that.
MAX_CSV_BYTES = 64 * 1024 * 1024
MAX_TEXT_BYTES = 4 * 1024 * 1024
CHUNK = 64 * 1024  # bytes read at a time: reading stops within a chunk of the cap

# What each option expects, for errors about files that hold none of it.
EXPECTED = {
    "--topo": "an `nvidia-smi topo -m` matrix (a header line GPU0 GPU1 ..., then a row per GPU)",
    "--p2p": "an `nvidia-smi topo -p2p r` matrix (a header line GPU0 GPU1 ..., then a row per GPU)",
    "--query-csv": "`nvidia-smi --query-gpu=... --format=csv` output (a header line naming "
    "the fields, then a row per GPU)",
    "--smi-q": "`nvidia-smi -q` output (a `GPU 00000000:...` section per GPU)",
    "--kernel-log": "a kernel log (`dmesg` or `journalctl -k` output)",
}


class AnalyzeError(ValueError):
    """A file that cannot be read, or holds none of what its option expects."""


class _Seen:
    """Lines passed through as they stream, remembering the first non-blank one."""

    def __init__(self, lines: Iterable[str]):
        self.lines = lines
        self.first: str | None = None

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            if self.first is None and line.strip():
                self.first = line.strip()
            yield line

    def looks(self) -> str:
        if self.first is None:
            return "the input is empty (or blank)"
        cut = self.first[:SHOWN] + ("..." if len(self.first) > SHOWN else "")
        return f"its first line reads {cut!r}"


def _nothing(option: str, seen: _Seen, found: str = "no GPU row") -> AnalyzeError:
    return AnalyzeError(f"{option}: expected {EXPECTED[option]}; found {found}: {seen.looks()}")


def _size(limit: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} bytes"


class _Capped(io.RawIOBase):
    """A binary file read in chunks of at most CHUNK bytes, raising AnalyzeError as soon as
    more than ``limit`` bytes came: at most ``limit + 1`` bytes are ever read."""

    def __init__(self, file, name: str, limit: int):
        self.file, self.name, self.limit, self.count = file, name, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), CHUNK, self.limit + 1 - self.count)
        got = self.file.readinto(memoryview(buffer)[:want])
        self.count += got or 0
        if self.count > self.limit:
            raise _too_big(self.name, self.limit)
        return got

    def close(self) -> None:
        self.file.close()
        super().close()


def _too_big(name: str, limit: int) -> AnalyzeError:
    """``name``: an option (``--topo``, which run() turns into its file) or a file."""
    takes = f"{name} takes" if name.startswith("--") else "an input takes"
    return AnalyzeError(
        f"{name}: more than {_size(limit)}, not read beyond that ({takes} at most "
        f"{_size(limit)}; nvidia-smi prints far less: is it the right file, or an endless "
        "device or pipe?)"
    )


def file_lines(path: Path, limit: int = MAX_TEXT_BYTES, option: str | None = None) -> Iterator[str]:
    """A file's lines as they are read, each cut at MAX_LINE characters; AnalyzeError once
    more than ``limit`` bytes come (a regular file larger than that is refused unread), its
    message starting with ``option`` (else the file)."""
    name = option or str(path)
    try:
        raw = path.open("rb", buffering=0)
    except OSError as error:
        raise AnalyzeError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        info = os.fstat(raw.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise _too_big(name, limit)
        capped = io.BufferedReader(_Capped(raw, name, limit), buffer_size=CHUNK)
        with io.TextIOWrapper(capped, errors="replace") as file:
            while line := file.readline(MAX_LINE):
                rest = line
                while not rest.endswith("\n") and len(rest) == MAX_LINE:
                    rest = file.readline(MAX_LINE)  # skip the rest of a cut line
                yield line
    except OSError as error:
        raise AnalyzeError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        raw.close()


def _rows(query_csv: Iterable[str] | None, smi_q: Iterable[str] | None) -> list[dict]:
    if query_csv is not None:
        seen = _Seen(query_csv)
        try:
            csv = read_gpu_query_csv(seen)
        except GpuQueryError as error:
            raise AnalyzeError(f"--query-csv: {error}") from None
        if not csv.fields:
            found = (
                "no header line (keep it: `--format=csv`, not `--format=csv,noheader`; the "
                "header names the fields)"
            )
            raise _nothing("--query-csv", seen, found)
        if not csv.samples[-1]:
            raise _nothing("--query-csv", seen, f"a header ({', '.join(csv.fields)}) but no row")
        return merged_samples(csv.samples)
    if smi_q is not None:
        seen = _Seen(smi_q)
        shape = _SmiQShape()
        try:
            rows = parse_smi_q(shape.watch(seen))
        except GpuQueryError as error:
            raise AnalyzeError(f"--smi-q: {error}") from None
        if not rows:
            raise _nothing("--smi-q", seen)
        cut = shape.cut_off(len(rows))
        if cut:
            raise AnalyzeError(
                f"--smi-q: {cut}: the output is cut off (a paste or a capture stopped early?); "
                "give the whole `nvidia-smi -q`"
            )
        return rows
    return []


class _SmiQShape:
    """What a whole `nvidia-smi -q` shows of itself: its "Attached GPUs" count, and a section
    of about the same length for each GPU (one model, one driver: the same fields)."""

    # The last GPU's section shorter than this share of the shortest other one: cut off.
    # The processes a GPU lists are left out of the count (they differ from GPU to GPU).
    SHORTEST_SHARE = 0.8

    def __init__(self):
        self.attached: int | None = None
        self.lengths: list[int] = []
        self._gpu_indent = 0
        self._in_processes = False

    def watch(self, lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            text = ANSI_ESCAPE.sub("", line.rstrip("\r\n"))
            stripped = text.strip()
            indent = len(text) - len(text.lstrip(" "))
            key, colon, value = stripped.partition(":")
            if colon and key.strip() == "Attached GPUs" and self.attached is None:
                self.attached = int(value) if value.strip().isdigit() else None
            if SMI_Q_GPU_LINE.fullmatch(stripped):
                self.lengths.append(0)
                self._gpu_indent, self._in_processes = indent, False
            elif self.lengths and stripped:
                if indent <= self._gpu_indent + 4:  # a section of the GPU's own
                    self._in_processes = key.strip() == "Processes"
                if not self._in_processes:
                    self.lengths[-1] += 1
            yield line

    def cut_off(self, gpus: int) -> str | None:
        if self.attached is not None and gpus < self.attached:
            return f"it holds {gpus} of the {self.attached} GPUs its Attached GPUs line counts"
        if len(self.lengths) > 1:
            shortest = min(self.lengths[:-1])
            if self.lengths[-1] < self.SHORTEST_SHARE * shortest:
                return (
                    f"the last GPU's section has {self.lengths[-1]} lines, the others at "
                    f"least {shortest}"
                )
        return None


_GPU_KEYS = ("index", "pci.bus_id", "uuid")


def merged_samples(samples: list[list[dict]]) -> list[dict]:
    """One row per GPU from the blocks of a capture: of blocks with the same fields (an `-l`
    loop) the last stands; a block of other fields adds its columns (two `--query-gpu`
    commands in one capture file: each counts), its readings standing over earlier ones. A
    GPU is known by its index, bus id or uuid, any of them linking the blocks."""
    # Blocks of the same fields are samples of one command: the last of them stands (a file
    # may hold two machines' captures of one command: the last is judged, as before).
    last_of: dict[frozenset, list[dict]] = {}
    for sample in samples:
        if sample:
            last_of.pop(frozenset(sample[0]), None)
            last_of[frozenset(sample[0])] = sample
    rows: list[dict] = []
    known: dict[tuple[str, str], dict] = {}
    for sample in last_of.values():
        for row in sample:
            keys = [(key, row[key]) for key in _GPU_KEYS if row.get(key)]
            merged = next((known[key] for key in keys if key in known), None)
            if merged is None:
                merged = {}
                rows.append(merged)
            merged.update(row)
            for key in _GPU_KEYS:
                if merged.get(key):
                    known[(key, merged[key])] = merged
    return rows


def _matrix(option: str, lines: Iterable[str] | None) -> dict:
    if lines is None:
        return {}
    seen = _Seen(lines)
    try:
        found = read_topo(seen)
        matrix = found.topology if option == "--topo" else found.p2p("r")
    except TopoError as error:
        raise AnalyzeError(f"{option}: {error}") from None
    if not matrix:
        other = (
            f"{found.matrices} matrices, none of them the one expected"
            if found.matrices
            else "no GPU row"
        )
        raise _nothing(option, seen, other)
    gaps = _matrix_gaps(matrix)
    if gaps:
        raise AnalyzeError(
            f"{option}: the matrix is cut off ({gaps}): a paste or a capture stopped early? "
            "give the whole output"
        )
    return matrix


def _matrix_gaps(matrix: dict) -> str | None:
    """What a GPU matrix lacks: a row for each GPU of its columns, a cell for each column of
    each row (a whole `nvidia-smi topo` output has both)."""
    columns = sorted({column for cells in matrix.values() for column in cells})
    rows = [name for name in columns if name not in matrix]
    if rows:
        return f"no row for {', '.join(rows)}"
    short = [name for name, cells in matrix.items() if set(cells) != set(columns)]
    if short:
        return f"{', '.join(short)}'s row lacks cells"
    return None


def _keeping(lines: Iterable[str], kept: list[str]) -> Iterator[str]:
    for line in lines:
        kept.append(line)
        yield line


def analyze(
    topo: Iterable[str] | None = None,
    p2p: Iterable[str] | None = None,
    query_csv: Iterable[str] | None = None,
    smi_q: Iterable[str] | None = None,
    kernel_log: Iterable[str] | None = None,
) -> dict:
    """``{"gpus", "topology": {"matrix", "nvlink"}, "p2p", "findings"}`` from whichever
    outputs are given, each read as it streams. A query CSV with several samples of one
    command is judged on the last; blocks of other fields add their columns (merged_samples);
    files carry no load, so link generations are judged as possibly idle. An input holding
    no GPU row raises AnalyzeError: nothing that was not read is reported as passing."""
    kept: list[str] = []  # the -q text, read once more for its Fabric sections (capped)
    rows = _rows(query_csv, _keeping(smi_q, kept) if smi_q is not None else None)
    if query_csv is not None and smi_q is not None:
        # The CSV gives the rows; the -q is still read, for what only it holds (ECC, row
        # remapping, retired pages, the fabric): given, it counts, or it is refused.
        seen = _Seen(_keeping(smi_q, kept))
        try:
            if not parse_smi_q(seen):
                raise _nothing("--smi-q", seen)
        except GpuQueryError as error:
            raise AnalyzeError(f"--smi-q: {error}") from None
    matrix = _matrix("--topo", topo)
    peers = _matrix("--p2p", p2p)
    gpu_count = len(rows) or len(matrix) or len(peers)
    findings = findings_for_links(rows, [], "capture") + findings_for_persistence(rows, {})
    if topo is not None:
        findings += findings_for_topology(matrix, gpu_count)
    if p2p is not None:
        findings += findings_for_p2p(peers, gpu_count, vm=None)
    if smi_q is not None:
        findings += findings_for_fabric_state(parse_fabric_sections(kept))
    # GPU health: the kernel log's Xids (named with the GPU of their PCI address where the
    # other inputs list it) and the -q ECC, row remapping and retired pages sections.
    xids = read = None
    if kernel_log is not None:
        try:
            log = kernel_log_lines(kernel_log)
        except KernelLogError as error:
            raise AnalyzeError(f"--kernel-log: {error}") from None
        xids = list(parse_xid_lines(log))
        text = [line for line in log if line.strip()]
        read = {"events": xids, "read": log_coverage(text[0], len(text), "file")}
    memory = parse_health_q(kept) if smi_q is not None else None
    findings += findings_for_gpu_health(rows, read, memory, None, [], "none")
    return {
        "gpus": pcie_links(rows),
        "topology": {"matrix": matrix, "nvlink": topology_has_nvlink(matrix)},
        "p2p": {"matrix": peers, "ok": p2p_all_ok(peers)},
        "xids": xids,
        "findings": [f.as_dict() for f in findings],
        "result": worst_level(findings),
    }


def run(args: argparse.Namespace) -> int:
    options = {"--topo": args.topo, "--p2p": args.p2p, "--query-csv": args.query_csv}
    options["--smi-q"] = args.smi_q
    options["--kernel-log"] = args.kernel_log
    given = {option: path for option, path in options.items() if path}
    if not given:
        print(
            "analyze: give at least one of --topo, --p2p, --query-csv, --smi-q, --kernel-log",
            file=sys.stderr,
        )
        return 2
    caps = {"--query-csv": MAX_CSV_BYTES, "--kernel-log": MAX_CSV_BYTES}
    texts = [
        file_lines(path, caps.get(option, MAX_TEXT_BYTES), option) if path else None
        for option, path in options.items()
    ]
    try:
        result = analyze(*texts)
    except AnalyzeError as error:
        message = str(error)
        for option, path in given.items():  # name the file behind the option
            if message.startswith(f"{option}: "):
                message = f"{path} ({option}){message[len(option) :]}"
        print(f"analyze: {message}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, IndexError) as error:
        names = ", ".join(str(path) for path in given.values())
        print(f"analyze: {names}: not the nvidia-smi output expected ({error})", file=sys.stderr)
        return 2
    label = ", ".join(str(path) for path in given.values())
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        findings = [Finding(**f) for f in result["findings"]]
        print(format_table(label, findings, what="analysis"))
    return 1 if result["result"] == "fail" else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topo", type=Path, help="`nvidia-smi topo -m` output (the file may hold P2P matrices too)"
    )
    parser.add_argument(
        "--p2p", type=Path, help="`nvidia-smi topo -p2p r` output (the file may hold others too)"
    )
    parser.add_argument(
        "--query-csv",
        type=Path,
        help="`nvidia-smi --query-gpu=... --format=csv` output: any fields, with its header",
    )
    parser.add_argument(
        "--smi-q",
        type=Path,
        help="`nvidia-smi -q` output (its ECC, Remapped Rows and Retired Pages sections are "
        "judged too)",
    )
    parser.add_argument(
        "--kernel-log",
        type=Path,
        help="`dmesg` or `journalctl -k` output: each Xid named with its GPU's PCI address, "
        "meaning and action",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
