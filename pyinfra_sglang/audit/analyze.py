"""`pyinfra-sglang analyze`: the audit's parsers and checks on captured files, for hosts you
cannot reach (a pasted `nvidia-smi topo -m`, a `--query-gpu` CSV, an `nvidia-smi -q`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from pyinfra_sglang.audit.drift import findings_for_persistence
from pyinfra_sglang.audit.findings import Finding, worst_level
from pyinfra_sglang.audit.links import findings_for_links, pcie_links
from pyinfra_sglang.audit.report import format_table
from pyinfra_sglang.audit.topology import findings_for_p2p, findings_for_topology, p2p_all_ok
from pyinfra_sglang.parsers.nvidia_smi import GpuQueryError, parse_smi_q, read_gpu_query_csv
from pyinfra_sglang.parsers.topo import TopoError, read_topo, topology_has_nvlink

# A line longer than this is cut (the rest skipped): a binary or one-line file of any size
# takes bounded memory.
MAX_LINE = 64 * 1024
SHOWN = 60  # characters of a file's first line an error shows

# What each option expects, for errors about files that hold none of it.
EXPECTED = {
    "--topo": "an `nvidia-smi topo -m` matrix (a header line GPU0 GPU1 ..., then a row per GPU)",
    "--p2p": "an `nvidia-smi topo -p2p r` matrix (a header line GPU0 GPU1 ..., then a row per GPU)",
    "--query-csv": "`nvidia-smi --query-gpu=... --format=csv` output (a header line naming "
    "the fields, then a row per GPU)",
    "--smi-q": "`nvidia-smi -q` output (a `GPU 00000000:...` section per GPU)",
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


def file_lines(path: Path) -> Iterator[str]:
    """A file's lines as they are read, each cut at MAX_LINE characters."""
    try:
        with path.open(errors="replace") as file:
            while line := file.readline(MAX_LINE):
                rest = line
                while not rest.endswith("\n") and len(rest) == MAX_LINE:
                    rest = file.readline(MAX_LINE)  # skip the rest of a cut line
                yield line
    except OSError as error:
        raise AnalyzeError(f"cannot read {path}: {error.strerror or error}") from None


def _rows(query_csv: Iterable[str] | None, smi_q: Iterable[str] | None) -> list[dict]:
    if query_csv is not None:
        seen = _Seen(query_csv)
        try:
            csv = read_gpu_query_csv(seen, keep=1)
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
        return csv.samples[-1]
    if smi_q is not None:
        seen = _Seen(smi_q)
        rows = parse_smi_q(seen)
        if not rows:
            raise _nothing("--smi-q", seen)
        return rows
    return []


def _matrix(option: str, lines: Iterable[str] | None) -> dict:
    if lines is None:
        return {}
    seen = _Seen(lines)
    found = read_topo(seen)
    try:
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
    return matrix


def analyze(
    topo: Iterable[str] | None = None,
    p2p: Iterable[str] | None = None,
    query_csv: Iterable[str] | None = None,
    smi_q: Iterable[str] | None = None,
) -> dict:
    """``{"gpus", "topology": {"matrix", "nvlink"}, "p2p", "findings"}`` from whichever
    outputs are given, each read as it streams. A query CSV with several samples is judged on
    its last one (the last row per GPU); files carry no load, so link generations are judged
    as possibly idle. An input holding no GPU row raises AnalyzeError: nothing that was not
    read is reported as passing."""
    rows = _rows(query_csv, smi_q)
    matrix = _matrix("--topo", topo)
    peers = _matrix("--p2p", p2p)
    gpu_count = len(rows) or len(matrix) or len(peers)
    findings = findings_for_links(rows, [], "none") + findings_for_persistence(rows, {})
    if topo is not None:
        findings += findings_for_topology(matrix, gpu_count)
    if p2p is not None:
        findings += findings_for_p2p(peers, gpu_count, vm=None)
    return {
        "gpus": pcie_links(rows),
        "topology": {"matrix": matrix, "nvlink": topology_has_nvlink(matrix)},
        "p2p": {"matrix": peers, "ok": p2p_all_ok(peers)},
        "findings": [f.as_dict() for f in findings],
        "result": worst_level(findings),
    }


def run(args: argparse.Namespace) -> int:
    options = {"--topo": args.topo, "--p2p": args.p2p, "--query-csv": args.query_csv}
    options["--smi-q"] = args.smi_q
    given = {option: path for option, path in options.items() if path}
    if not given:
        print("analyze: give at least one of --topo, --p2p, --query-csv, --smi-q", file=sys.stderr)
        return 2
    texts = [file_lines(path) if path else None for path in options.values()]
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
    parser.add_argument("--smi-q", type=Path, help="`nvidia-smi -q` output")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
