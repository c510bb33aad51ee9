"""Nothing reads as OK that was not read: `nvidia-smi -q` values it could not read, fields a
user's query left out, and `analyze` inputs holding no GPU row. Variants are derived in each
test from the real captures named."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pyinfra_sglang.audit.drift import findings_for_persistence
from pyinfra_sglang.audit.judge import judge
from pyinfra_sglang.audit.links import findings_for_links
from pyinfra_sglang.audit.record import GpuLoadReading
from pyinfra_sglang.cli.main import main
from pyinfra_sglang.parsers.nvidia_smi import parse_gpu_query_csv, parse_smi_q
from tests.unit.captures import captured_lines
from tests.unit.test_audit_judge import expectations, h200_facts
from tests.unit.test_query_csv import H200, H200_UTIL, RTX_X8, columns
from tests.unit.test_topo_files import P2P_R, TOPO

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
# The real full `nvidia-smi -q` of 8x RTX PRO 6000 (MIG Mode sections, N/A values), without
# its `# source:` line.
RTX_Q = (FIXTURES / "smiq_8x_rtxpro6000_server_driver595_full.txt").read_text().splitlines()[1:]


def codes(findings, level=None):
    return sorted({f.code for f in findings if level is None or f.level == level})


def in_gpu(lines: list[str], gpu: int, key: str, value: str) -> list[str]:
    """``lines`` with ``key``'s value in GPU ``gpu``'s section replaced by ``value``."""
    starts = [i for i, line in enumerate(lines) if line.startswith("GPU 0000")]
    at = next(i for i in range(starts[gpu], len(lines)) if line_key(lines[i]) == key)
    name, _, _ = lines[at].partition(":")
    return [*lines[:at], f"{name}: {value}", *lines[at + 1 :]]


def line_key(line: str) -> str:
    return line.partition(":")[0].strip()


def test_smi_q_reads_mig_mode_sections_apart_from_the_link():
    rows = parse_smi_q(RTX_Q)
    # MIG Mode's own Current (Disabled) is not the link's Current.
    assert [(r["pcie.link.gen.current"], r["pcie.link.width.current"]) for r in rows] == [
        ("1", "16")
    ] * 8
    assert all(row["persistence_mode"] == "Enabled" for row in rows)


def test_smi_q_err_and_bracketed_na_read_as_unread():
    lines = in_gpu(RTX_Q, 3, "Persistence Mode", "ERR!")
    lines = in_gpu(lines, 6, "Max", "[N/A]")  # GPU 6's first Max: PCIe Generation's
    rows = parse_smi_q(lines)
    assert rows[3]["persistence_mode"] is None and rows[6]["pcie.link.gen.max"] is None
    persistence = findings_for_persistence(rows, {})
    assert codes(persistence) == ["persistence-mode-unknown"]
    assert persistence[0].evidence["gpus"] == [3]
    links = findings_for_links(rows, [], "none")
    unknown = [f for f in links if f.code == "pcie-link-unknown"]
    assert [f.gpu for f in unknown] == [6]
    assert unknown[0].evidence["unread"] == {"pcie.link.gen.max": "unreadable"}
    assert "pcie-links" not in codes(links)


def test_smi_q_indented_as_a_whole_reads_the_same():
    assert parse_smi_q(["    " + line for line in RTX_Q]) == parse_smi_q(RTX_Q)


def test_missing_columns_are_unknown_not_ok():
    rows = parse_gpu_query_csv(H200_UTIL)  # a user's query without link or persistence fields
    links, persistence = findings_for_links(rows, [], "none"), findings_for_persistence(rows, {})
    assert codes(links) == ["pcie-link-unknown"] and codes(persistence) == [
        "persistence-mode-unknown"
    ]
    assert "no such column" in links[0].message
    assert persistence[0].evidence["read"] == {"0": "missing", "1": "missing"}


def test_the_live_audit_reports_na_readings_as_unknown():
    # The H200 VM's own [N/A] (pcie.link.gen.hostmax) moved onto two fields the judge reads.
    lines = [H200[0]] + [
        line.replace(", Enabled,", ", [N/A],").replace(", 5, 5, 5,", ", 5, [N/A], 5,")
        for line in H200[1:]
    ]
    gpus = parse_gpu_query_csv(lines)
    # Read so idle and under the copy load alike.
    load = GpuLoadReading(kind="copy", samples=[gpus], probe={"gpus": []})
    findings = judge(expectations(), h200_facts(gpus=gpus, load=load))
    assert {"pcie-link-unknown", "persistence-mode-unknown"} <= set(codes(findings, "warn"))
    assert not {"pcie-links", "persistence-mode"} & set(codes(findings, "ok"))


def run_analyze(tmp_path, capsys, **files: bytes | list[str]) -> tuple[int, str, str]:
    argv = ["analyze"]
    for option, content in files.items():
        path = tmp_path / f"{option}.txt"
        path.write_bytes(content if isinstance(content, bytes) else "\n".join(content).encode())
        argv += [f"--{option.replace('_', '-')}", str(path)]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_analyze_refuses_input_without_a_gpu_row(tmp_path, capsys):
    code, out, err = run_analyze(tmp_path, capsys, query_csv=[])
    assert (code, out) == (2, "") and "found no header line" in err and "is empty" in err
    # A capture someone gzipped: binary, one long first line.
    packed = gzip.compress((FIXTURES / "h200x2-nvlink-vm" / "smi.txt").read_bytes())
    code, _, err = run_analyze(tmp_path, capsys, smi_q=packed)
    assert code == 2 and "expected `nvidia-smi -q` output" in err and "first line reads" in err
    code, _, err = run_analyze(tmp_path, capsys, topo=H200)  # a CSV given as topology
    assert code == 2 and "--topo): expected an `nvidia-smi topo -m` matrix" in err
    assert "reads 'index, name, pci.bus_id, driver_version, pcie.link.gen.curre...'" in err


def test_analyze_refuses_a_csv_without_its_header(tmp_path, capsys):
    code, _, err = run_analyze(tmp_path, capsys, query_csv=RTX_X8[1:])
    assert code == 2
    assert "keep it: `--format=csv`, not `--format=csv,noheader`" in err
    assert "first line reads '0, NVIDIA RTX PRO 6000" in err


def test_analyze_judges_a_users_own_columns(tmp_path, capsys):
    fields = ["pcie.link.width.current", "index", "pcie.link.width.max"]
    code, out, _ = run_analyze(tmp_path, capsys, query_csv=columns(RTX_X8, fields))
    assert code == 1  # GPU 5 at x8 of x16, read from a reordered subset
    rows = [line.split()[:3] for line in out.splitlines()[2:]]
    assert ["fail", "pcie-width-degraded", "5"] in rows
    assert ["warn", "persistence-mode-unknown", "-"] in rows
    assert ["warn", "pcie-link-unknown", "0"] in rows  # generation not in the query


def test_analyze_takes_each_matrix_from_a_file_holding_both(tmp_path, capsys):
    both = TOPO + P2P_R
    code, out, _ = run_analyze(tmp_path, capsys, topo=both, p2p=both)
    assert code == 0
    # --json: the matrices themselves
    code = main(["analyze", "--topo", str(tmp_path / "topo.txt"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["topology"]["nvlink"] is True
    assert [f["code"] for f in result["findings"]] == ["topology"]
    assert captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m") == TOPO


XID_79 = (FIXTURES / "public" / "xid_79_pid0_journalctl.txt").read_text()


@pytest.mark.parametrize(
    ("case", "content", "said"),
    [
        ("empty", b"", "empty: no line was read"),
        ("blank lines", b"\n\n  \n", "empty: no line was read"),
        ("not a kernel log", b"index, name\n0, NVIDIA H200\n", "looks like a kernel log's"),
        ("UTF-16", XID_79.encode("utf-16"), "not a text kernel log"),
        ("gzipped", gzip.compress(XID_79.encode()), "not a text kernel log"),
    ],
)
def test_a_kernel_log_that_is_none_is_refused_never_ok(tmp_path, capsys, case, content, said):
    """Issue 47: each of these said "no Xid in the kernel log since boot"."""
    code, out, err = run_analyze(tmp_path, capsys, kernel_log=content)
    assert (code, out) == (2, "") and "--kernel-log" in err and said in err, err


def test_a_colored_dmesg_is_read_through_its_escapes(tmp_path, capsys):
    """dmesg --color=always colors the stamp and the subsystem prefix apart from the text
    ("NVRM: " then "Xid ..."): Xid 79 is still found (it said "no Xid")."""
    colored = "\n".join(
        "\x1b[32m[ 1234.5678]\x1b[0m \x1b[33mNVRM: \x1b[0m" + line.split(" kernel: NVRM: ", 1)[1]
        for line in XID_79.splitlines()
        if " kernel: NVRM: " in line
    )
    code, out, err = run_analyze(tmp_path, capsys, kernel_log=colored.encode())
    assert code == 1 and "gpu-xid" in out and "79" in out, out + err


def test_smi_q_beside_a_query_csv_still_counts(tmp_path, capsys):
    """Issue 47: with --query-csv, every -q check (ECC, row remapping, the fabric) was
    dropped while the -q file was listed as analyzed; docs/audit.md shows that pair."""
    smi_q = (FIXTURES / "h200x2-nvlink-vm" / "smi_q.txt").read_text().splitlines()
    broken = [
        f"{line.split(':')[0]}: 3" if "DRAM Uncorrectable" in line else line for line in smi_q
    ]
    code, out, err = run_analyze(tmp_path, capsys, query_csv=H200, smi_q=broken)
    assert code == 1 and "ecc-uncorrectable" in out, out + err
    code, out, err = run_analyze(tmp_path, capsys, query_csv=H200, smi_q=["not a -q capture"])
    assert code == 2 and "--smi-q" in err, err


def test_an_all_ns_p2p_matrix_names_the_vms_clique(tmp_path, capsys):
    """Issue 47: an all-NS matrix pasted from a VM got ACS/IOMMU advice alone, and was told
    to run the very command it came from."""
    all_ns = [line.replace("OK", "NS") for line in P2P_R]
    code, out, err = run_analyze(tmp_path, capsys, p2p=all_ns)
    text = " ".join(out.split())
    assert "p2p-unavailable" in text and "GPUDirect clique" in text, out + err
    assert "x-nv-gpudirect-clique" in text and "Check with" not in text
