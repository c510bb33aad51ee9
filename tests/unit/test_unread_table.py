"""Issue 47 (coverage in every verdict): for every check `analyze` makes, its input with the
section the check reads missing, its values N/A, NaN or negative, the file cut off, or in
another encoding. None of them may give "ok" for that check: a warning that says what was
not read, or a refusal of the file. Variants are made in each test from real captures (the
2x H200 VM's `nvidia-smi -q`, query and topology; a real journal with Xid 79)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from tests.unit.captures import captured_lines
from tests.unit.test_query_csv import GPU_QUERY_FIELDS

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
SMI_Q = (GPU / "h200x2-nvlink-vm" / "smi_q.txt").read_text()
QUERY = captured_lines(
    "h200x2-nvlink-vm", f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
)
TOPO = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m")
P2P = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r")
XID_LOG = (GPU / "public" / "xid_79_pid0_journalctl.txt").read_text()


def _section(text: str, title: str) -> list[tuple[int, int]]:
    """Line spans (start, end) of every ``title`` section of a -q text: its line and the
    lines indented deeper below it."""
    lines = text.splitlines()
    spans = []
    for i, line in enumerate(lines):
        if line.strip() == title and not line.rstrip().endswith(":"):
            indent = len(line) - len(line.lstrip())
            end = i + 1
            while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip())) > indent:
                end += 1
            spans.append((i, end))
    assert spans, title
    return spans


def without(text: str, title: str) -> str:
    lines = text.splitlines()
    for start, end in reversed(_section(text, title)):
        del lines[start:end]
    return "\n".join(lines) + "\n"


def values(text: str, title: str, value: str) -> str:
    """Every value in the ``title`` sections set to ``value``."""
    lines = text.splitlines()
    for start, end in _section(text, title):
        for i in range(start + 1, end):
            name, sep, _ = lines[i].partition(" : ")
            if sep:
                lines[i] = f"{name} : {value}"
    return "\n".join(lines) + "\n"


def cut(text: str, share: float = 0.55) -> str:
    return text[: int(len(text) * share)]


# check code -> the -q sections it reads
Q_SECTIONS = {
    "gpu-health": ("ECC Errors", "Remapped Rows", "Retired Pages", "ECC Mode"),
    "pcie-links": ("GPU Link Info",),
    "persistence-mode": None,  # one line: Persistence Mode
    "fabric-manager": ("Fabric",),
}


# Values nvidia-smi prints for what it could not read, and two a corrupted capture holds. A
# Fabric State of N/A is NVIDIA's own word for a GPU without a fabric (data/nvidia.toml
# unattached_states: a real reading), so the fabric check gets an unknown word instead.
VALUES = {
    None: ("N/A", "nan", "-1", "[N/A]", "ERR!"),
    "fabric-manager": ("Unknown", "nan", "-1", "[N/A]", "ERR!"),
}


def q_variants(code: str) -> list[tuple[str, object]]:
    sections = Q_SECTIONS[code]
    found = []
    if sections is None:
        line = re.compile(r"^(\s*Persistence Mode\s*:).*$", re.M)
        found.append(("missing", line.sub("", SMI_Q)))
        for value in ("N/A", "nan", "-1", "[N/A]", "ERR!"):
            found.append((value, line.sub(lambda m, v=value: f"{m.group(1)} {v}", SMI_Q)))
    else:
        text = SMI_Q
        for title in sections:
            text = without(text, title)
        found.append(("missing", text))
        for value in VALUES.get(code, VALUES[None]):
            text = SMI_Q
            for title in sections:
                text = values(text, title, value)
            found.append((value, text))
    found.append(("cut-off", cut(SMI_Q)))
    found.append(("utf-16", SMI_Q.encode("utf-16")))
    return found


def analyze(tmp_path, capsys, option: str, content) -> tuple[int, dict | None, str]:
    path = tmp_path / "input"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code = main(["analyze", option, str(path), "--json"])
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except ValueError:
        return code, None, err


def assert_not_ok(result: tuple[int, dict | None, str], codes: tuple[str, ...]) -> None:
    status, report, err = result
    if report is None or "findings" not in report:
        assert status == 2, result  # refused, with its reason
        return
    said = [f for f in report["findings"] if f["code"] in codes]
    oks = [f for f in said if f["level"] == "ok"]
    assert not oks, oks


@pytest.mark.parametrize(
    ("code", "case", "content"),
    [(code, case, content) for code in Q_SECTIONS for case, content in q_variants(code)],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_smi_q_checks_say_no_ok_about_what_they_could_not_read(
    tmp_path, capsys, code, case, content
):
    assert_not_ok(analyze(tmp_path, capsys, "--smi-q", content), (code,))


def csv_variants() -> list[tuple[str, object]]:
    header, *rows = QUERY
    text = "\n".join(QUERY) + "\n"
    found = [("header-only", header + "\n")]
    for value in ("[N/A]", "nan", "-1", "[Unknown Error]"):
        cells = [", ".join([r.split(", ")[0], *[value] * (len(r.split(", ")) - 1)]) for r in rows]
        found.append((value, "\n".join([header, *cells]) + "\n"))
    found.append(("cut-off", text[: len(header) + 1 + len(rows[0]) // 2]))
    found.append(("utf-16", text.encode("utf-16")))
    return found


@pytest.mark.parametrize(
    ("case", "content"),
    csv_variants(),
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_query_checks_say_no_ok_about_what_they_could_not_read(tmp_path, capsys, case, content):
    assert_not_ok(
        analyze(tmp_path, capsys, "--query-csv", content), ("pcie-links", "persistence-mode")
    )


def matrix_variants(lines: list[str]) -> list[tuple[str, object]]:
    text = "\n".join(lines) + "\n"
    rows = [line for line in lines if line.strip().startswith("GPU")]
    return [
        ("empty", ""),
        ("header-only", lines[0] + "\n"),
        # Cut inside the GPU cells: the last row holds its name and one cell.
        ("cut-off", "\n".join([lines[0], rows[0], "\t".join(rows[1].split("\t")[:2])]) + "\n"),
        ("last-row-gone", "\n".join([lines[0], rows[0]]) + "\n"),
        ("utf-16", text.encode("utf-16")),
        ("not-a-matrix", "hello\nworld\n"),
    ]


@pytest.mark.parametrize(
    ("case", "content"),
    matrix_variants(TOPO),
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_topology_says_no_ok_about_what_it_could_not_read(tmp_path, capsys, case, content):
    assert_not_ok(analyze(tmp_path, capsys, "--topo", content), ("topology",))


@pytest.mark.parametrize(
    ("case", "content"),
    matrix_variants(P2P),
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_p2p_says_no_ok_about_what_it_could_not_read(tmp_path, capsys, case, content):
    assert_not_ok(analyze(tmp_path, capsys, "--p2p", content), ("p2p",))


@pytest.mark.parametrize(
    ("case", "content"),
    [
        ("empty", ""),
        ("cut-off", XID_LOG[: len(XID_LOG) // 2].rsplit("NVRM", 1)[0]),
        ("utf-16", XID_LOG.encode("utf-16")),
        ("gzip", gzip.compress(XID_LOG.encode())),
        ("not-a-log", "hello\nworld\n"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_the_xid_check_says_no_ok_about_what_it_could_not_read(tmp_path, capsys, case, content):
    assert_not_ok(analyze(tmp_path, capsys, "--kernel-log", content), ("xid",))


def test_a_colored_log_with_an_xid_is_read_through_its_escapes(tmp_path, capsys):
    # `dmesg --color=always`: the Xid 79 is found, never an ok.
    colored = "".join(f"\x1b[32m{line}\x1b[0m\n" for line in XID_LOG.splitlines())
    status, report, _ = analyze(tmp_path, capsys, "--kernel-log", colored)
    assert status == 1 and {f["code"] for f in report["findings"]} == {"gpu-xid"}


def test_a_gpu_listing_many_processes_is_no_cut_off(tmp_path, capsys):
    # Real outputs differ by the processes each GPU lists: 40 on GPU 0 and none on GPU 1 is
    # a whole output, not a cut one.
    process = (
        "        Process ID                        : {pid}\n"
        "            Type                          : C\n"
        "            Name                          : python3\n"
        "            Used GPU Memory               : 1024 MiB\n"
    )
    busy = "".join(process.format(pid=1000 + n) for n in range(40))
    first, second = SMI_Q.split("GPU 00000000:00:07.0", 1)
    text = (
        first.replace(
            "    Processes                                          : None\n",
            "    Processes\n" + busy,
        )
        + "GPU 00000000:00:07.0"
        + second
    )
    assert text.count("Process ID") == 40
    status, report, err = analyze(tmp_path, capsys, "--smi-q", text)
    assert status in (0, 1) and report is not None, err
