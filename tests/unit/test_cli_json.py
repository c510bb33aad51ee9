"""Every offline command takes --json and prints one strict JSON document on stdout (numbers
that are not finite as null), its errors too: {"error", "command", "status"}, with the exit
status the command has without --json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pyinfra_sglang.cli.json_output import run_as_json
from pyinfra_sglang.cli.main import COMMANDS, build_parser, main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOPO = FIXTURES / "gpu" / "public" / "topo_8x_rtxpro6000_wrx90_2switch_pix_node_trimmed.txt"


def strict(text: str):
    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run(argv: list[str], capsys) -> tuple[int, object, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, strict(out), err


def test_every_command_has_json():
    parser = build_parser(every=True)
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in COMMANDS:
        parser = subparsers.choices[command.name]
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        # A command of actions (`profile new`): each action takes --json.
        for each in actions[0].choices.values() if actions else [parser]:
            assert "--json" in each._option_string_actions, command.name


def test_inventory_reference(capsys):
    code, value, _ = run(["inventory-reference", "--json"], capsys)
    fields = {f["name"]: f for f in value["fields"]}
    assert code == 0 and fields["sglang_port"]["default"] == 30000
    assert fields["sglang_host"]["default"] == "127.0.0.1" and fields["sglang_port"]["description"]


def test_inventory_reference_write_error(capsys, tmp_path):
    code, value, _ = run(["inventory-reference", "--write", str(tmp_path), "--json"], capsys)
    assert code == 2 and value["status"] == 2 and "cannot update" in value["error"]


INVENTORY = """
pair = [
    ("node-a", {"ssh_hostname": "10.0.0.11", "sglang_multinode_group": "pair",
                "expected_gpu_count": 4}),
    ("node-b", {"ssh_hostname": "10.0.0.12", "sglang_multinode_group": "pair",
                "expected_gpu_count": 4}),
]
routers = [
    ("router-1", {"sglang_model_profile": "dense-bf16",
                  "sglang_router_worker_urls": ["http://10.0.0.21:30000",
                                                "http://10.0.0.22:30000"]}),
]
"""


@pytest.fixture
def inventory_file(tmp_path) -> Path:
    path = tmp_path / "inventory.py"
    path.write_text(INVENTORY)
    return path


def test_validate(capsys, inventory_file):
    code, value, _ = run(["validate", str(inventory_file), "--json"], capsys)
    assert code == 0 and value["hosts"] == ["node-a", "node-b", "router-1"]


def test_validate_invalid_inventory_lists_its_problems(capsys, inventory_file):
    argv = ["validate", str(inventory_file), "--data", "sglang_port=0", "--json"]
    code, value, _ = run(argv, capsys)
    assert code == 1 and value["error"].startswith("invalid inventory")
    assert {(p["host"], p["field"]) for p in value["problems"]} >= {("node-a", "sglang_port")}


def test_validate_missing_file(capsys, tmp_path):
    code, value, _ = run(["validate", str(tmp_path / "none.py"), "--json"], capsys)
    assert (code, value["status"], value["command"]) == (2, 2, "validate")
    assert "no such file" in value["error"]


def test_build_plan(capsys):
    argv = ["build-plan", "--cores", "128", "--mem-gb", "512", "--archs", "120", "--json"]
    code, value, _ = run(argv, capsys)
    assert code == 0 and (value["max_jobs"], value["nvcc_threads"]) == (19, 4)
    assert value["env"]["FLASH_ATTN_CUDA_ARCHS"] == "120" and value["archs"] == ["120"]


def test_build_plan_refused(capsys):
    argv = ["build-plan", "--cores", "4", "--mem-gb", "1", "--json"]
    code, value, _ = run(argv, capsys)
    assert code == 1 and value["error"].startswith("refused: not even one")


def test_a_bad_argument_is_a_json_error_with_status_2(capsys):
    code, value, err = run(["build-plan", "--cores", "0", "--mem-gb", "8", "--json"], capsys)
    assert code == 2 and value["status"] == 2 and value["command"] == "build-plan"
    assert "--cores: not a positive whole number: '0'" in value["error"]


RENDER = ["render", "--profile", "dense-bf16", "--gpus", "2", "--arch", "sm_90"]


def test_render(capsys):
    code, value, _ = run([*RENDER, "--sglang-version", "0.5.23", "--json"], capsys)
    assert code == 0
    assert [f["path"] for f in value["files"]] == [
        "/etc/systemd/system/sglang.service",
        "/etc/sglang/sglang.env",
        "/etc/sglang/sglang.yaml",
    ]
    assert "--tp-size 2" in value["files"][0]["content"] and value["gpus"]["count"] == 2


def test_render_refused(capsys):
    argv = ["render", "--profile", "glm-5-nvfp4", "--gpus", "4", "--arch", "sm_120"]
    code, value, _ = run([*argv, "--sglang-version", "0.5.23", "--json"], capsys)
    assert code == 1 and value["error"].startswith("refused: profile glm-5-nvfp4 does not fit 4 x")


def test_packages(capsys):
    code, value, _ = run(["packages", "--platform", "debian12", "--json"], capsys)
    assert code == 0 and value["platform"] == "debian12" and value["branch"] == 590
    assert value["pin"] and value["packages"]


def test_analyze(capsys):
    code, value, _ = run(["analyze", "--topo", str(TOPO), "--json"], capsys)
    assert code in (0, 1) and "topology-pcie-only" in {f["code"] for f in value["findings"]}


def test_diagnose(capsys):
    sampler_run = FIXTURES / "gpu" / "h200x2-nvlink-vm-sampler"
    code, value, _ = run(["diagnose", str(sampler_run), "--json"], capsys)
    assert code == 0 and "interconnect-bound" in {f["code"] for f in value["findings"]}


def test_diagnose_error(capsys, tmp_path):
    code, value, _ = run(["diagnose", str(tmp_path), "--json"], capsys)
    assert code == 2 and "no samples.jsonl" in value["error"]


def _bench(path: Path, rows: list[tuple[int, float]]) -> Path:
    path.mkdir()
    lines = [{"max_concurrency": c, "output_throughput": t, "completed": 8} for c, t in rows]
    (path / "bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_ab_compare(capsys, tmp_path):
    a = _bench(tmp_path / "a", [(8, 100.0), (8, 101.0)])
    b = _bench(tmp_path / "b", [(8, 120.0), (8, 121.0)])
    code, value, _ = run(["ab-compare", "--a", str(a), "--b", str(b), "--json"], capsys)
    assert code == 0 and value[0]["concurrency"] == 8 and value[0]["verdict"] == "real"


def test_ab_compare_error(capsys, tmp_path):
    a = _bench(tmp_path / "a", [(8, 100.0)])
    b = _bench(tmp_path / "b", [(16, 100.0)])
    code, value, _ = run(["ab-compare", "--a", str(a), "--b", str(b), "--json"], capsys)
    assert code == 2 and value["error"] == "ab-compare: the two sides share no concurrency"


def test_decode_check_unreachable(capsys):
    argv = ["decode-check", "--url", "http://127.0.0.1:9", "--timeout", "2", "--json"]
    code, value, _ = run(argv, capsys)
    assert code == 1 and value["ok"] is False and value["reason"] == "connection-refused"


def test_report_error(capsys, tmp_path):
    code, value, _ = run(["report", str(tmp_path / "none"), "--json"], capsys)
    assert code == 2 and value["command"] == "report" and "no such folder" in value["error"]


def test_report(capsys, tmp_path):
    from tests.unit.test_report import host_run

    folder = host_run(tmp_path)
    code, value, _ = run(["report", str(folder), "--json"], capsys)
    assert code == 0 and value["page"] == str(folder / "report" / "report.html")


def test_numbers_that_are_not_finite_become_null(capsys, monkeypatch):
    # A command whose writer let NaN and Infinity through (json.dumps allows them).
    def loose(args):
        print(json.dumps({"ratio": float("nan"), "rows": [float("inf"), 1.5]}))
        return 0

    args = argparse.Namespace(func=loose, command="loose", json=True)
    assert run_as_json(args) == 0
    assert strict(capsys.readouterr().out) == {"ratio": None, "rows": [None, 1.5]}
