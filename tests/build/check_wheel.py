"""The wheel: only the core and its CLI land in site-packages (no generic top-level `roles` or
`checks`), and the installed `pyinfra-sglang` runs every offline command from a fresh venv,
outside the checkout, on real captured files.

Run in CI's lint stage (scripts/build_checks.sh), not by ``uv run pytest``: this file's name
does not match ``test_*.py``, so only naming it collects it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import zipfile
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
GPU_FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
OFFLINE_COMMANDS = {
    "inventory-reference",
    "validate",
    "build-plan",
    "plan",
    "profile",
    "render",
    "packages",
    "decode-check",
    "analyze",
    "diagnose",
    "ab-compare",
    "report",
}

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="uv builds the wheel")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout."""
    dist = tmp_path_factory.mktemp("dist")
    build = ["uv", "build", "--wheel", "--out-dir", str(dist), str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    [built] = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; returns its bin/."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run(["uv", "venv", "-q", str(venv)], check=True, capture_output=True, timeout=120)
    install = ["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    return venv / "bin"


def run(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The console script, run outside the checkout so nothing from it is importable."""
    return subprocess.run(
        [str(bin_dir / "pyinfra-sglang"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wheel_holds_only_the_core_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
        names = archive.namelist()
    assert {top for top in tops if not top.endswith(".dist-info")} == {"pyinfra_sglang"}
    # What the core needs at run time travels with it.
    assert "pyinfra_sglang/templates/sglang.service.j2" in names
    assert "pyinfra_sglang/data/profiles/glm-5-nvfp4.toml" in names
    assert "pyinfra_sglang/host_programs/decode_client.py" in names


def test_every_offline_command_is_tested_here():
    assert {command.name for command in COMMANDS} == OFFLINE_COMMANDS


def test_no_generic_top_level_packages_are_installed(installed, tmp_path):
    python = installed / "python"
    for name in ("roles", "checks", "deploy"):
        found = subprocess.run(
            [str(python), "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True
        )
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, name


def test_inventory_reference_validate_render_and_build_plan(installed, tmp_path):
    reference = run(installed, tmp_path, "inventory-reference")
    assert reference.returncode == 0 and "| `sglang_model_profile`" in reference.stdout

    (tmp_path / "inventory.py").write_text(
        "gpu_hosts = [('gpu-1', {'sglang_model_profile': 'dense-bf16'})]\n"
    )
    validated = run(installed, tmp_path, "validate", "inventory.py")
    assert validated.returncode == 0 and validated.stdout.startswith("gpu-1: ok\n  fit: ")
    refused = run(installed, tmp_path, "validate", "inventory.py", "--data", "sglang_port=0")
    assert refused.returncode == 1 and "sglang_port" in refused.stderr

    rendered = run(
        installed,
        tmp_path,
        "render",
        "--profile=dense-bf16",
        "--gpus=2",
        "--arch=sm_90",
        "--sglang-version=0.5.23",
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "--tp-size 2" in rendered.stdout and "# ==> /etc/sglang/sglang.yaml" in rendered.stdout

    plan = run(installed, tmp_path, "build-plan", "--cores", "16", "--mem-gb", "64")
    assert plan.returncode == 0 and plan.stdout.startswith("MAX_JOBS=")

    packages = run(installed, tmp_path, "packages", "--platform", "debian12")
    assert packages.returncode == 0 and "     nvidia-driver-cuda\n" in packages.stdout


def test_plan_and_profile_new_read_a_models_config(installed, tmp_path):
    folder = tmp_path / "qwen3-32b"
    folder.mkdir()
    shutil.copy(ROOT / "tests/fixtures/model-configs/Qwen--Qwen3-32B/config.json", folder)
    gpu = "--gpu-model=NVIDIA H100 80GB HBM3"
    planned = run(installed, tmp_path, "plan", f"--model={folder}", "--gpus=8", gpu, "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["model"]["params_b"] == 32.76
    written = run(installed, tmp_path, "profile", "new", str(folder))
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "profiles" / "qwen3-32b.toml").is_file()


def test_analyze_diagnose_decode_check_and_ab_compare(installed, tmp_path):
    smi = GPU_FIXTURES / "h200x2-nvlink-vm" / "smi_q.txt"
    analyzed = run(installed, tmp_path, "analyze", "--smi-q", str(smi), "--json")
    assert analyzed.returncode == 0, analyzed.stderr
    assert len(json.loads(analyzed.stdout)["gpus"]) == 2

    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(GPU_FIXTURES / "h200x2-nvlink-vm" / "samples.json", results / "samples.json")
    diagnosed = run(installed, tmp_path, "diagnose", str(results))
    assert diagnosed.returncode == 0 and "GPU 0: 19 samples" in diagnosed.stdout
    reported = run(installed, tmp_path, "report", str(results))
    assert reported.returncode == 0, reported.stderr
    page = (results / "report" / "report.html").read_text()
    # Two GPUs' timelines; no benchmark results, so no throughput chart but a line saying so.
    assert page.count("data:image/png") == 2 and "has no benchmark results" in page

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    checked = run(
        installed, tmp_path, "decode-check", "--url", f"http://127.0.0.1:{port}", "--json"
    )
    assert checked.returncode == 1 and json.loads(checked.stdout)["reason"] == "connection-refused"

    sides = {}
    for side, rates in (("a", (100.0, 101.0)), ("b", (150.0, 151.0))):
        sides[side] = []
        for index, rate in enumerate(rates):
            folder = tmp_path / f"{side}{index}"
            folder.mkdir()
            line = {"max_concurrency": 1, "output_throughput": rate, "completed": 8}
            (folder / "bench.jsonl").write_text(json.dumps(line) + "\n")
            sides[side].append(str(folder))
    compared = run(installed, tmp_path, "ab-compare", "--a", *sides["a"], "--b", *sides["b"])
    assert compared.returncode == 0, compared.stderr
    assert "real" in compared.stdout
