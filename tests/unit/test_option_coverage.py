"""Issue 47 (no silent drop): every option of `analyze`, `render`, `diagnose` and `report`
counts in the output or is refused. For each option a pair of command lines, one without it
(or with another value) and one with it: the two must differ in what they print, or the one
with it must be refused naming the option. The table must name every option the parser has,
so a new option comes with its case."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import COMMANDS, main
from tests.unit.captures import captured_lines
from tests.unit.test_query_csv import GPU_QUERY_FIELDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GPU = FIXTURES / "gpu"
RUN = FIXTURES / "sglang-0.5.17-h200" / "capped"
# The audit's own query, as captured on the real 2x H200 VM.
QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
COMMAND_NAMES = ("analyze", "render", "diagnose", "report")


@pytest.fixture
def files(tmp_path):
    def write(name: str, lines: list[str]) -> str:
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    topo = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m")
    pcie_topo = captured_lines("rtxpro6000x8-pcie-x8-of-x16", "nvidia-smi topo -m")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    builtin = Path(__file__).resolve().parents[2] / "pyinfra_sglang" / "data" / "profiles"
    mine = (builtin / "dense-bf16.toml").read_text()
    (profiles / "dense-bf16.toml").write_text(
        mine.replace("start_timeout_s = 600", "start_timeout_s = 900")
    )
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "gpu_servers = [\n"
        "    ('gpu-a', {'expected_gpu_count': 2, 'expected_gpu_model': 'NVIDIA H200',\n"
        "               'sglang_model_profile': 'dense-bf16'}),\n"
        "    ('gpu-b', {'expected_gpu_count': 4, 'expected_gpu_model': 'NVIDIA H200',\n"
        "               'sglang_model_profile': 'dense-bf16'}),\n"
        "]\n"
    )
    return {
        "topo": write("topo.txt", topo),
        "pcie_topo": write("pcie-topo.txt", pcie_topo),
        "p2p": write("p2p.txt", captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r")),
        "csv": write("query.csv", captured_lines("h200x2-nvlink-vm", QUERY)),
        "smi_q": str(GPU / "h200x2-nvlink-vm" / "smi_q.txt"),
        "kernel_log": str(GPU / "public" / "xid_79_pid0_journalctl.txt"),
        "profiles": str(profiles),
        "run": str(run),
        "out_a": str(tmp_path / "out-a"),
        "out_b": str(tmp_path / "out-b"),
        "inventory": str(inventory),
    }


RENDER = ["render", "--profile", "dense-bf16", "--gpus", "2", "--arch", "sm_90"]
RENDER += ["--sglang-version", "0.5.17"]
GLM = ["render", "--profile", "glm-5-nvfp4", "--gpus", "8", "--arch", "sm_100"]
GLM += ["--sglang-version", "0.5.23"]
MULTI = [*RENDER, "--nnodes", "2", "--dist-init-addr", "10.0.0.1:5000"]
INVENTORY = ["render", "--inventory", "{inventory}", "--inventory-host", "gpu-a"]
# option: (without, with), each a command line; {name} takes a file of the fixture.
CASES = {
    "analyze": {
        "--query-csv": (
            ["analyze", "--topo", "{topo}"],
            ["analyze", "--topo", "{topo}", "--query-csv", "{csv}"],
        ),
        "--topo": (
            ["analyze", "--query-csv", "{csv}"],
            ["analyze", "--query-csv", "{csv}", "--topo", "{topo}"],
        ),
        "--p2p": (
            ["analyze", "--topo", "{topo}"],
            ["analyze", "--topo", "{topo}", "--p2p", "{p2p}"],
        ),
        "--smi-q": (
            ["analyze", "--query-csv", "{csv}"],
            ["analyze", "--query-csv", "{csv}", "--smi-q", "{smi_q}"],
        ),
        "--kernel-log": (
            ["analyze", "--topo", "{topo}"],
            ["analyze", "--topo", "{topo}", "--kernel-log", "{kernel_log}"],
        ),
        "--json": (["analyze", "--topo", "{topo}"], ["analyze", "--topo", "{topo}", "--json"]),
    },
    "render": {
        "--profile": (GLM, [*GLM[:2], "glm-5-nvfp4-dense", *GLM[3:]]),
        "--gpus": (RENDER, [*RENDER[:4], "1", *RENDER[5:]]),
        "--arch": (RENDER, [*RENDER[:6], "sm_100", *RENDER[7:]]),
        "--sglang-version": (RENDER, [*RENDER[:-1], "0.5.23"]),
        "--gpu-mem-gb": (RENDER, [*RENDER, "--gpu-mem-gb", "24"]),
        "--host": (RENDER, [*RENDER, "--host", "10.0.0.5"]),
        "--port": (RENDER, [*RENDER, "--port", "30001"]),
        "--venv": (RENDER, [*RENDER, "--venv", "/opt/other-venv"]),
        "--profile-dir": (RENDER, [*RENDER, "--profile-dir", "{profiles}"]),
        "--pcie-only": (RENDER, [*RENDER, "--pcie-only"]),
        "--topo": (RENDER, [*RENDER, "--topo", "{pcie_topo}"]),
        "--nnodes": (RENDER, MULTI),
        "--node-rank": (MULTI, [*MULTI, "--node-rank", "1"]),
        "--dist-init-addr": (MULTI, [*MULTI[:-1], "10.0.0.2:5000"]),
        "--json": (RENDER, [*RENDER, "--json"]),
        "--inventory": (RENDER, INVENTORY),
        "--inventory-host": (INVENTORY, [*INVENTORY[:-1], "gpu-b"]),
        "--data": (INVENTORY, [*INVENTORY, "--data", "sglang_port=30007"]),
    },
    "diagnose": {
        "--json": (["diagnose", "{run}"], ["diagnose", "{run}", "--json"]),
    },
    "report": {
        "--output": (
            ["report", "{run}", "--output", "{out_a}"],
            ["report", "{run}", "--output", "{out_b}"],
        ),
        "--json": (
            ["report", "{run}", "--output", "{out_a}"],
            ["report", "{run}", "--output", "{out_a}", "--json"],
        ),
    },
}


def parser_options(name: str) -> set[str]:
    command = next(c for c in COMMANDS if c.name == name)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_option_has_its_case(name):
    assert set(CASES[name]) == parser_options(name)


def _run(argv: list[str], files: dict, capsys) -> tuple[int, str, str]:
    line = [word.format(**files) for word in argv]
    try:
        code = main(line)
    except SystemExit as exit_:  # argparse's refusals
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "option"), [(n, o) for n in COMMAND_NAMES for o in CASES[n]], ids=lambda v: v
)
def test_each_option_counts_or_is_refused(name, option, files, capsys):
    without, with_it = CASES[name][option]
    before = _run(without, files, capsys)
    after = _run(with_it, files, capsys)
    # The pair's base runs (exit 1: a finding that fails, as analyze's of a real Xid).
    assert before[0] in (0, 1) and before[1], before
    if after[0] not in (0, 1) or not after[1]:
        assert option in after[2], after  # refused, naming it
    else:
        # The paths of the run differ between the two (tmp_path), never the whole point.
        assert after[1] != before[1], f"{option} changed nothing in the output"
