"""Command generation of the Python environment and flash-attn roles from fact inputs."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.hardware import Cpus

from checks.facts import MemoryInfo, NvidiaGpus, PythonPackages, PythonVersion
from pyinfra_sglang.flash_attn_build_plan import BuildPlanError
from roles.flash_attn import flash_attn_built
from roles.python_env import missing_requirements, python_venv, uv_installed, venv_packages
from tests.unit.ophelper import run_operation

VENV = "/opt/sglang/venv"
INDEX = "https://pypi.org/simple"


def test_uv_is_installed_with_pip_from_the_index():
    commands, noops = run_operation(
        uv_installed, {PythonPackages: {}}, version="0.13.9", index_url=INDEX
    )
    assert commands == [
        "test -x /opt/sglang/uv/bin/pip || python3 -m venv /opt/sglang/uv",
        "/opt/sglang/uv/bin/pip install --quiet --disable-pip-version-check "
        f"--index-url {INDEX} uv==0.13.9",
    ]
    commands, noops = run_operation(
        uv_installed, {PythonPackages: {"uv": "0.13.9"}}, version="0.13.9", index_url=INDEX
    )
    assert commands == [] and noops == ["uv 0.13.9 is installed in /opt/sglang/uv"]


def test_index_credentials_are_masked():
    url = "https://deploy:s3cret@mirror.internal/simple"
    commands, _ = run_operation(uv_installed, {PythonPackages: {}}, version="0.13.9", index_url=url)
    assert "s3cret" not in " ".join(commands) and "*MASKED*" in commands[1]


@pytest.mark.parametrize(("found", "changes"), [(None, True), ("3.11.2", True), ("3.12.3", False)])
def test_venv_is_created_or_recreated_for_the_pinned_python(found, changes):
    commands, noops = run_operation(
        python_venv, {PythonVersion: found}, path=VENV, python_version="3.12"
    )
    if changes:
        assert commands == [f"/opt/sglang/uv/bin/uv venv --clear --python 3.12 {VENV}"]
    else:
        assert commands == [] and noops == [f"{VENV} runs Python 3.12.3"]


def test_missing_requirements():
    installed = {"sglang": "0.5.22", "flash-attn": "2.8.3", "ninja": "1.13.0"}
    requirements = {"sglang": "0.5.23", "flash_attn": "2.8.3", "ninja": None, "psutil": None}
    assert missing_requirements(installed, requirements) == ["sglang==0.5.23", "psutil"]


def test_changing_a_pin_installs_exactly_that_package():
    installed = {"sglang": "0.5.22", "torch": "2.14.1+cu130"}
    commands, _ = run_operation(
        venv_packages,
        {PythonPackages: installed},
        venv=VENV,
        requirements={"sglang": "0.5.23"},
        index_url=INDEX,
        extra_index_url="https://download.pytorch.org/whl/cu130",
    )
    assert commands == [
        f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
        "--extra-index-url https://download.pytorch.org/whl/cu130 sglang==0.5.23"
    ]
    commands, noops = run_operation(
        venv_packages,
        {PythonPackages: {"sglang": "0.5.23"}},
        venv=VENV,
        requirements={"sglang": "0.5.23"},
        index_url=INDEX,
    )
    assert commands == [] and noops == [f"{VENV} has sglang"]


def gpu(compute_cap):
    return {"index": "0", "name": "NVIDIA H200", "compute_cap": compute_cap}


GB = 1024**2  # kB
BUILD_FACTS = {
    PythonPackages: {"flash-attn": "2.8.2"},
    NvidiaGpus: [gpu("9.0"), gpu("9.0")],
    Cpus: 16,
    MemoryInfo: {"total_kb": 70 * GB, "available_kb": 64 * GB},
}
BUILD_ARGS = dict(
    venv=VENV,
    version="2.8.3",
    archs_override=None,
    memory_fraction=0.75,
    cuda_home="/usr/local/cuda-13.1",
    index_url=INDEX,
)


def test_flash_attn_build_command_carries_the_plan_and_keeps_the_log():
    commands, noops = run_operation(flash_attn_built, BUILD_FACTS, **BUILD_ARGS)
    assert noops == [] and len(commands) == 1
    command = commands[0]
    # 16 cores, 64 GB available: 48 GB bound -> 9 threads of 5 GB -> 3 jobs x 3 threads.
    assert (
        "env MAX_JOBS=3 NVCC_THREADS=3 FLASH_ATTN_CUDA_ARCHS=90 FLASH_ATTENTION_FORCE_BUILD=TRUE"
        in command
    )
    assert "CUDA_HOME=/usr/local/cuda-13.1" in command
    assert "--no-build-isolation" in command and "flash-attn==2.8.3" in command
    assert "> /var/log/pyinfra-sglang/flash-attn-2.8.3-build.log 2>&1" in command
    assert "tail -n 40 /var/log/pyinfra-sglang/flash-attn-2.8.3-build.log >&2; exit $rc" in command


def test_flash_attn_archs_from_the_inventory_win():
    commands, _ = run_operation(
        flash_attn_built, BUILD_FACTS, **{**BUILD_ARGS, "archs_override": ["90", "120"]}
    )
    assert "FLASH_ATTN_CUDA_ARCHS='90;120'" in commands[0]


def test_flash_attn_at_the_pin_is_a_noop():
    facts = {**BUILD_FACTS, PythonPackages: {"flash-attn": "2.8.3"}}
    commands, noops = run_operation(flash_attn_built, facts, **BUILD_ARGS)
    assert commands == [] and noops == ["flash-attn 2.8.3 is installed"]


def test_no_gpus_yet_is_a_pending_change_then_a_clear_error():
    facts = {**BUILD_FACTS, NvidiaGpus: []}
    # Change detection runs before this deploy installs the driver: a change is pending.
    commands, _ = run_operation(flash_attn_built, facts, executing=False, **BUILD_ARGS)
    assert len(commands) == 1 and commands[0].startswith("true")
    with pytest.raises(OperationError, match="set flash_attn_cuda_archs"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)


def test_no_memory_for_one_job_is_refused():
    facts = {**BUILD_FACTS, MemoryInfo: {"total_kb": 8 * GB, "available_kb": 4 * GB}}
    with pytest.raises(BuildPlanError, match="not even one flash-attn compile job fits"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)
