"""What `analyze` and the parsers must refuse or flag rather than report as OK: a composite
capture whose only CSV-looking lines are other commands' output, readings nvidia-smi cannot
print (negative utilization or power, a link above its maximum), the same GPU twice, and
inputs without end (/dev/zero, an oversized file). Variants are derived in each test from the
real captures named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyinfra_sglang.audit import analyze as analyze_module
from pyinfra_sglang.audit.links import findings_for_links
from pyinfra_sglang.cli.main import main
from pyinfra_sglang.parsers.nvidia_smi import (
    GpuQueryError,
    gpu_query_header,
    parse_gpu_query_csv,
    parse_smi_q,
    read_gpu_query_csv,
)
from pyinfra_sglang.parsers.topo import TopoError, read_topo
from tests.unit.test_query_csv import H200, H200_UTIL, columns
from tests.unit.test_topo_files import TOPO
from tests.unit.test_unread_inputs import RTX_Q, run_analyze

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
# The real 2x H200 VM's whole capture: the two --query-gpu CSVs among nvidia-smi -L, topo,
# nvcc --version, os-release, `free -g`, `ls /usr/local` ... each after its `### command`.
H200_CAPTURE = FIXTURES / "h200x2-nvlink-vm" / "smi.txt"
H200_LINES = H200_CAPTURE.read_text().splitlines()
# The capture's lines after its query CSVs: nvcc's banner, `ls /usr/local` (bin, cuda, src,
# ...: one lowercase word a line) and the `### rc=0` markers.
AFTER_CSV = H200_LINES[H200_LINES.index(H200_UTIL[-1]) + 1 :]
NVCC = [line for line in AFTER_CSV if line.startswith(("nvcc:", "Cuda compilation"))]


def codes(findings, level=None):
    return sorted({f.code for f in findings if level is None or f.level == level})


# -- 1. a composite capture: only the real header starts a CSV --------------------------------


def test_other_commands_output_is_no_csv_header():
    assert len(NVCC) == 2 and "src" in AFTER_CSV
    assert [line for line in AFTER_CSV if gpu_query_header(line) is not None] == []
    # The real headers still are.
    assert gpu_query_header(H200[0])[:3] == ["index", "name", "pci.bus_id"]
    assert gpu_query_header(H200_UTIL[0])[1] == "utilization.gpu"


def test_a_composite_capture_reports_only_the_gpus_of_its_csv():
    csv = read_gpu_query_csv(H200_LINES)
    assert [len(sample) for sample in csv.samples] == [2, 2]
    assert csv.fields == gpu_query_header(H200_UTIL[0])
    assert [row["index"] for row in csv.samples[-1]] == ["0", "1"]
    # nvcc's banner and what follows it, with no CSV before them: no header, no GPU.
    assert read_gpu_query_csv(NVCC + AFTER_CSV) == ([], [])


def test_analyze_of_a_composite_capture_names_no_invented_gpu(tmp_path, capsys):
    code, out, err = run_analyze(tmp_path, capsys, query_csv=H200_LINES)
    assert code == 0 and err == ""
    assert "None" not in out
    # Its two --query-gpu blocks are read block by block, each GPU's columns merged: the
    # links block is judged (issue 47: it said "no such column" for columns it holds).
    assert "no such column" not in out and "not read" not in out
    assert "2 GPU links at their maximum" in out and "persistence mode on for all 2 GPUs" in out


def test_analyze_refuses_a_capture_without_a_csv_header(tmp_path, capsys):
    code, out, err = run_analyze(tmp_path, capsys, query_csv=NVCC + AFTER_CSV)
    assert (code, out) == (2, "")
    assert "(--query-csv): expected `nvidia-smi --query-gpu" in err and "no header line" in err
    assert "first line reads 'nvcc: NVIDIA (R) Cuda compiler driver'" in err
    # The real 8x RTX PRO 6000 `nvidia-smi -q` given as a CSV: refused, not read as GPUs.
    code, _, err = run_analyze(tmp_path, capsys, query_csv=RTX_Q)
    assert code == 2 and "no header line" in err and "Traceback" not in err


def test_rows_whose_gpu_cell_is_no_gpu_are_not_rows():
    # A header, its rows, then capture markers and other lines of as many cells.
    lines = columns(H200, ["index", "pcie.link.width.current"]) + ["### rc=0, x", "bin, 16"]
    assert [row["index"] for row in parse_gpu_query_csv(lines)] == ["0", "1"]
    by_bus = columns(H200, ["pci.bus_id", "pcie.link.width.max"]) + ["cuda-13, 16"]
    assert len(parse_gpu_query_csv(by_bus)) == 2
    # Without a GPU column, a `### ...` marker line is never a row either.
    one = columns(H200, ["pcie.link.width.current"]) + ["### rc=0"]
    assert len(parse_gpu_query_csv(one)) == 2


# -- 2. readings nvidia-smi cannot print --------------------------------------------------------


def with_cell(lines: list[str], row: int, field: str, value: str) -> list[str]:
    """A CSV capture with ``field`` of data row ``row`` set to ``value``."""
    header = [cell.strip().split(" [", 1)[0] for cell in lines[0].split(",")]
    cells = lines[row + 1].split(", ")
    cells[header.index(field)] = value
    return [*lines[: row + 1], ", ".join(cells), *lines[row + 2 :]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("utilization.gpu", "-5 %"),
        ("utilization.memory", "-1 %"),
        ("power.draw", "-115.01 W"),
        ("utilization.gpu", "250 %"),
    ],
)
def test_impossible_percentages_and_power_are_refused(field, value):
    lines = with_cell(H200_UTIL, 1, field, value)
    with pytest.raises(GpuQueryError, match=f"GPU 1: {field} reads '{value}'"):
        parse_gpu_query_csv(lines)
    bare = with_cell(H200_UTIL, 1, field, value.split()[0])  # --format=csv,nounits
    with pytest.raises(GpuQueryError, match=f"{field} reads"):
        parse_gpu_query_csv(bare)


def test_power_limit_below_zero_is_refused_and_zero_utilization_read():
    with pytest.raises(GpuQueryError, match="power.limit reads '-700.00 W'"):
        parse_gpu_query_csv(with_cell(H200, 0, "power.limit", "-700.00 W"))
    assert parse_gpu_query_csv(H200_UTIL)[0]["utilization.gpu"] == "0 %"


def test_analyze_refuses_negative_utilization_naming_the_file(tmp_path, capsys):
    code, out, err = run_analyze(
        tmp_path, capsys, query_csv=with_cell(H200_UTIL, 0, "utilization.gpu", "-3 %")
    )
    assert (code, out) == (2, "")
    path = tmp_path / "query_csv.txt"
    assert err.startswith(f"analyze: {path} (--query-csv): GPU 0: utilization.gpu reads '-3 %'")
    assert "cannot be negative" in err and len(err.strip().splitlines()) == 1


def test_a_link_above_its_maximum_is_inconsistent_not_at_maximum():
    rows = parse_gpu_query_csv(with_cell(H200, 1, "pcie.link.gen.current", "6"))
    findings = findings_for_links(rows, [], "none")
    assert "pcie-links" not in codes(findings)
    [found] = [f for f in findings if f.gpu == 1]
    assert (found.level, found.code) == ("warn", "pcie-link-unknown")
    assert "Gen6 above its maximum Gen5" in found.message and "inconsistent" in found.message
    assert found.evidence["inconsistent"] == ["pcie.link.gen.current"]
    # Read under load alike; and a width above its maximum.
    loaded = findings_for_links(parse_gpu_query_csv(H200), [rows], "copy")
    assert [(f.code, f.gpu) for f in loaded] == [("pcie-link-unknown", 1)]
    wide = parse_gpu_query_csv(with_cell(H200, 0, "pcie.link.width.current", "32"))
    [found] = findings_for_links(wide, [], "none")
    assert found.gpu == 0 and "x32 above its maximum x16" in found.message


def test_analyze_warns_of_a_link_above_its_maximum(tmp_path, capsys):
    code, out, _ = run_analyze(
        tmp_path, capsys, query_csv=with_cell(H200, 0, "pcie.link.gen.current", "7")
    )
    assert code == 0 and out.startswith(f"analysis of {tmp_path / 'query_csv.txt'}: WARN")
    assert "pcie-links" not in out and "inconsistent" in out


def test_the_same_gpu_twice_is_refused():
    # GPU 1's row given GPU 0's bus id; then GPU 0's index given GPU 1's bus id.
    bus = with_cell(H200, 1, "pci.bus_id", H200[1].split(", ")[2])
    with pytest.raises(GpuQueryError, match="pci.bus_id 00000000:.* is on the rows of index 0"):
        parse_gpu_query_csv(bus)
    index = with_cell(H200, 1, "index", "0")
    with pytest.raises(GpuQueryError, match="index 0 is on the rows of pci.bus_id"):
        parse_gpu_query_csv(index)
    # A `-l` stream repeats each GPU with its own bus id: samples, not duplicates.
    assert len(parse_gpu_query_csv(H200 + H200[1:] * 3)) == 2


def test_the_same_gpu_twice_in_smi_q_is_refused():
    starts = [i for i, line in enumerate(RTX_Q) if line.startswith("GPU 0000")]
    first = RTX_Q[starts[0] : starts[1]]
    with pytest.raises(GpuQueryError, match=r"GPU 00000000:06:00.0 appears twice"):
        parse_smi_q(RTX_Q + first)
    assert len(parse_smi_q(RTX_Q)) == 8


def test_the_same_gpu_row_twice_in_a_matrix_is_refused():
    with pytest.raises(TopoError, match="GPU1's row appears twice"):
        read_topo([*TOPO, TOPO[2]])
    with pytest.raises(TopoError, match="GPU0 twice in one header"):
        read_topo([TOPO[0].replace("GPU1", "GPU0"), *TOPO[1:]])


def test_analyze_refuses_duplicate_gpus_naming_the_file(tmp_path, capsys):
    duplicate = with_cell(H200, 1, "index", "0")
    code, out, err = run_analyze(tmp_path, capsys, query_csv=duplicate)
    assert (code, out) == (2, "") and "Traceback" not in err
    assert err.startswith(f"analyze: {tmp_path / 'query_csv.txt'} (--query-csv): ")
    code, out, err = run_analyze(tmp_path, capsys, topo=[*TOPO, TOPO[2]])
    assert (code, out) == (2, "") and f"{tmp_path / 'topo.txt'} (--topo): " in err
    assert "GPU1's row appears twice" in err


# -- 3. inputs without end ----------------------------------------------------------------------


def test_the_caps_are_what_the_outputs_need():
    assert analyze_module.MAX_CSV_BYTES == 64 * 1024 * 1024
    assert analyze_module.MAX_TEXT_BYTES == 4 * 1024 * 1024
    # The largest capture here (8 GPUs' full `nvidia-smi -q`) is far below its cap.
    assert (FIXTURES / "smiq_8x_rtxpro6000_server_driver595_full.txt").stat().st_size < (
        analyze_module.MAX_TEXT_BYTES // 16
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
@pytest.mark.parametrize("option", ["--topo", "--p2p", "--smi-q", "--query-csv"])
def test_an_endless_device_is_refused_at_the_cap(option, monkeypatch, capsys):
    monkeypatch.setattr(analyze_module, "MAX_TEXT_BYTES", 256 * 1024)
    monkeypatch.setattr(analyze_module, "MAX_CSV_BYTES", 512 * 1024)
    cap = analyze_module.MAX_CSV_BYTES if option == "--query-csv" else 256 * 1024
    readers = []
    real = analyze_module._Capped.__init__

    def kept(self, *args):
        real(self, *args)
        readers.append(self)

    monkeypatch.setattr(analyze_module._Capped, "__init__", kept)
    start = time.monotonic()
    assert main(["analyze", option, "/dev/zero"]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert err.startswith(f"analyze: /dev/zero ({option}): more than {cap // 1024} KiB")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    [reader] = readers
    assert reader.count == cap + 1  # reading stopped one byte past the cap


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(analyze_module, "MAX_CSV_BYTES", 4096)
    big = tmp_path / "big.csv"
    big.write_text("\n".join(H200 + H200[1:] * 20) + "\n")  # a real -l stream, 2 samples a line
    assert big.stat().st_size > 4096
    assert main(["analyze", "--query-csv", str(big)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"analyze: {big} (--query-csv): more than 4 KiB")
    assert "--query-csv takes at most 4 KiB" in err
    # At the cap it is read.
    monkeypatch.setattr(analyze_module, "MAX_CSV_BYTES", big.stat().st_size)
    assert main(["analyze", "--query-csv", str(big)]) == 0


def test_a_pipe_fed_past_the_cap_is_refused(tmp_path, monkeypatch):
    # A FIFO fed real matrices without end: no size to check first, so reading stops at the cap.
    monkeypatch.setattr(analyze_module, "MAX_TEXT_BYTES", 8192)
    fifo = tmp_path / "topo.fifo"
    os.mkfifo(fifo)
    text = "\n".join(TOPO) + "\n"
    feed = f"import sys\nwith open(sys.argv[1], 'w') as out:\n    while True: out.write({text!r})"
    writer = subprocess.Popen([sys.executable, "-c", feed, str(fifo)], stderr=subprocess.DEVNULL)
    try:
        lines = analyze_module.file_lines(fifo, analyze_module.MAX_TEXT_BYTES)
        with pytest.raises(analyze_module.AnalyzeError, match=f"{fifo}: more than 8 KiB"):
            for _ in lines:
                pass
    finally:
        writer.kill()
        writer.wait(timeout=10)


def test_a_pasted_capture_gets_capture_advice_not_live_host_advice(tmp_path, capsys):
    # The real 8x RTX PRO 6000 query (idle, Gen1 of Gen5, derived from its -q): advice for a
    # file says how to take it again under load, never to start a service and audit a host.
    capture = FIXTURES / "rtxpro6000x8-pcie-from-smiq" / "smi.txt"
    code = main(["analyze", "--query-csv", str(capture), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    found = [f for f in findings if f["code"] == "pcie-gen-below-max"]
    assert len(found) == 8 and code == 0
    for finding in found:
        assert "capture the query again while the GPUs work" in finding["message"]
        assert "--format=csv -l 1" in finding["message"]
        assert "audit again" not in finding["message"]
        assert finding["evidence"]["load"] == "capture"
    # The same readings from a live host keep the live advice.
    rows = parse_gpu_query_csv(capture.read_text().splitlines())
    live = [f for f in findings_for_links(rows, [], "none") if f.code == "pcie-gen-below-max"]
    assert len(live) == 8 and all("start the SGLang service" in f.message for f in live)
