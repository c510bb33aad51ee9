"""`pyinfra-sglang analyze`: the audit's parsers and checks on captured files, for hosts you
cannot reach (a pasted `nvidia-smi topo -m`, a `--query-gpu` CSV, an `nvidia-smi -q`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pyinfra_sglang.audit.drift import findings_for_persistence
from pyinfra_sglang.audit.findings import worst_level
from pyinfra_sglang.audit.links import findings_for_links, pcie_links
from pyinfra_sglang.audit.report import format_table
from pyinfra_sglang.audit.topology import findings_for_p2p, findings_for_topology, p2p_all_ok
from pyinfra_sglang.parsers.nvidia_smi import (
    parse_gpu_query_csv,
    parse_smi_q,
    parse_topo_matrix,
    parse_topo_p2p,
    topology_has_nvlink,
)


class AnalyzeError(ValueError):
    """A file that cannot be read or parsed."""


def _lines(path: Path | None) -> list[str] | None:
    if path is None:
        return None
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError as error:
        raise AnalyzeError(f"cannot read {path}: {error.strerror or error}") from None


def analyze(
    topo: list[str] | None = None,
    p2p: list[str] | None = None,
    query_csv: list[str] | None = None,
    smi_q: list[str] | None = None,
) -> dict:
    """``{"gpus", "topology": {"matrix", "nvlink"}, "p2p", "findings"}`` from whichever
    outputs are given. A query CSV with several samples is judged on its last one; files
    carry no load, so link generations are judged as possibly idle."""
    rows = parse_gpu_query_csv(query_csv) if query_csv else parse_smi_q(smi_q) if smi_q else []
    matrix = parse_topo_matrix(topo) if topo else {}
    peers = parse_topo_p2p(p2p) if p2p else {}
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
    paths = (args.topo, args.p2p, args.query_csv, args.smi_q)
    given = [path for path in paths if path]
    if not given:
        print("analyze: give at least one of --topo, --p2p, --query-csv, --smi-q", file=sys.stderr)
        return 2
    try:
        texts = [_lines(path) for path in paths]
    except AnalyzeError as error:
        print(f"analyze: {error}", file=sys.stderr)
        return 2
    label = ", ".join(str(path) for path in given)
    try:
        result = analyze(*texts)
    except (ValueError, KeyError, IndexError) as error:
        print(f"analyze: {label}: not the nvidia-smi output expected ({error})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        from pyinfra_sglang.audit.findings import Finding

        findings = [Finding(**f) for f in result["findings"]]
        print(format_table(label, findings, what="analysis"))
    return 1 if result["result"] == "fail" else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topo", type=Path, help="`nvidia-smi topo -m` output")
    parser.add_argument("--p2p", type=Path, help="`nvidia-smi topo -p2p r` output")
    parser.add_argument(
        "--query-csv", type=Path, help="`nvidia-smi --query-gpu=... --format=csv` output"
    )
    parser.add_argument("--smi-q", type=Path, help="`nvidia-smi -q` output")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
