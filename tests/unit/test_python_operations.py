"""Command generation of the Python environment and flash-attn roles from fact inputs."""

from __future__ import annotations

import json

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.hardware import Cpus

from checks.facts import JsonRecord, MemoryInfo, NvidiaGpus, PythonPackages, PythonVersion
from pyinfra_sglang.flash_attn_build_plan import BuildPlanError
from roles.flash_attn import flash_attn_built
from roles.python_env import missing_requirements, python_venv, uv_installed, venv_packages
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

VENV = "/opt/sglang/venv"
INDEX = "https://pypi.org/simple"
CREDENTIALS_INDEX = "https://deploy:s3cret@mirror.internal/simple"
CREDENTIALS_TORCH_INDEX = "https://deploy:t0ken@mirror.internal/torch/cu130"
CREDENTIALS_DIR = "/run/pyinfra-sglang"


# The staging file's random name, fixed for these tests (fixed_staging_names).
STAGING = "/tmp/pyinfra-sglang-index." + "f" * 32


@pytest.fixture(autouse=True)
def fixed_staging_names(monkeypatch):
    import roles.python_env

    monkeypatch.setattr(roles.python_env, "token_hex", lambda size: "f" * (2 * size))


def credentials_uploads(*names: str) -> list[str]:
    """Root's 0700 folder, then each index URL with credentials uploaded to a 0600 file,
    through a staging file made 0600 first (used under _sudo) and removed after."""
    uploads = [f"install -d -m 700 {CREDENTIALS_DIR}"]
    for name in names:
        path = f"{CREDENTIALS_DIR}/{name}"
        uploads += [
            f"install -m 600 /dev/null {STAGING}",
            f"FileUploadCommand(<secret>, {path})",
            f"rm -f {STAGING}",
            f"chmod 600 {path}",
        ]
    return uploads


def from_file(variable: str, name: str) -> str:
    """The shell reads the file into the tool's variable, then removes it."""
    path = f"{CREDENTIALS_DIR}/{name}"
    return f'{variable}="$(cat {path})" && rm -f {path} && export {variable} &&'


UV_ARGS = {"version": "0.13.9", "index_url": INDEX}
VENV_ARGS = {"path": VENV, "python_version": "3.12"}


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
BUILD_LOG = "/var/log/pyinfra-sglang/flash-attn-2.8.3-build.log"
INSTALLED = {**BUILD_FACTS, PythonPackages: {"flash-attn": "2.8.3"}}


def record_of(archs: list[str]) -> dict:
    """A build record as the role writes it (see flash_attn_build)."""
    return {
        "version": "2.8.3",
        "seconds": 1500,
        "log": BUILD_LOG,
        "archs": archs,
        "env": {"FLASH_ATTN_CUDA_ARCHS": ";".join(archs)},
    }


def flash_attn_build(
    archs_export: str, archs: str, index_args: str = f"--index-url {INDEX}"
) -> str:
    """The build command for flash-attn 2.8.3 on BUILD_FACTS' host: 16 cores, 64 GB
    available: 48 GB bound -> 9 threads of 5 GB -> 3 jobs x 3 threads. It keeps the log,
    records the build, and shows the log's tail when the build fails."""
    index_args = f"{index_args} " if index_args else ""
    return (
        "mkdir -p /var/log/pyinfra-sglang && start=$(date +%s) && "
        "if env MAX_JOBS=3 NVCC_THREADS=3 "
        f"FLASH_ATTN_CUDA_ARCHS={archs_export} FLASH_ATTENTION_FORCE_BUILD=TRUE "
        "CUDA_HOME=/usr/local/cuda-13.1 PATH=/usr/local/cuda-13.1/bin:$PATH "
        f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python "
        "--no-build-isolation --reinstall-package flash-attn --no-cache "
        f"{index_args}flash-attn==2.8.3 > {BUILD_LOG} 2>&1; "
        "then printf "
        '\'{"version": %s, "seconds": %d, "log": %s, "archs": %s, "env": %s}\\n\' '
        f"'\"2.8.3\"' $(( $(date +%s) - start )) '\"{BUILD_LOG}\"' "
        f"'{json.dumps(archs.split(';'))}' "
        '\'{"CUDA_HOME": "/usr/local/cuda-13.1", "FLASH_ATTENTION_FORCE_BUILD": "TRUE", '
        f'"FLASH_ATTN_CUDA_ARCHS": "{archs}", "MAX_JOBS": "3", "NVCC_THREADS": "3"}}\' '
        "> /var/log/pyinfra-sglang/flash-attn-2.8.3-build.json; "
        "else rc=$?; "
        "echo 'flash-attn 2.8.3 build failed after' \"$(( $(date +%s) - start ))\" "
        f"'s; log: {BUILD_LOG}; its last lines:' >&2; "
        f"tail -n 40 {BUILD_LOG} >&2; exit $rc; fi"
    )


CASES = [
    # -- uv, installed with pip from the index ------------------------------------------------
    op_case(
        uv_installed,
        "installed-with-pip-from-the-index",
        {PythonPackages: {}},
        UV_ARGS,
        commands=[
            "test -x /opt/sglang/uv/bin/pip || python3 -m venv /opt/sglang/uv",
            "/opt/sglang/uv/bin/pip install --quiet --disable-pip-version-check "
            f"--index-url {INDEX} uv==0.13.9",
        ],
    ),
    op_case(
        uv_installed,
        "at-the-pin-is-a-noop",
        {PythonPackages: {"uv": "0.13.9"}},
        UV_ARGS,
        noops=["uv 0.13.9 is installed in /opt/sglang/uv"],
    ),
    op_case(
        uv_installed,
        "index-credentials-reach-pip-through-a-0600-file-not-its-command-line",
        {PythonPackages: {}},
        {**UV_ARGS, "index_url": CREDENTIALS_INDEX},
        commands=[
            "test -x /opt/sglang/uv/bin/pip || python3 -m venv /opt/sglang/uv",
            *credentials_uploads("index-url"),
            f"{from_file('PIP_INDEX_URL', 'index-url')} /opt/sglang/uv/bin/pip install --quiet "
            "--disable-pip-version-check uv==0.13.9",
        ],
    ),
    # -- the venv is created or recreated for the pinned Python -------------------------------
    op_case(
        python_venv,
        "created",
        {PythonVersion: None},
        VENV_ARGS,
        commands=[f"/opt/sglang/uv/bin/uv venv --clear --python 3.12 {VENV}"],
    ),
    op_case(
        python_venv,
        "recreated-for-another-python",
        {PythonVersion: "3.11.2"},
        VENV_ARGS,
        commands=[f"/opt/sglang/uv/bin/uv venv --clear --python 3.12 {VENV}"],
    ),
    op_case(
        python_venv,
        "on-the-pinned-python-is-a-noop",
        {PythonVersion: "3.12.3"},
        VENV_ARGS,
        noops=[f"{VENV} runs Python 3.12.3"],
    ),
    # -- changing a pin installs exactly that package -----------------------------------------
    op_case(
        venv_packages,
        "changed-pin-installs-exactly-that-package",
        {PythonPackages: {"sglang": "0.5.22", "torch": "2.14.1+cu130"}},
        {
            "venv": VENV,
            "requirements": {"sglang": "0.5.23"},
            "index_url": INDEX,
            "extra_index_url": "https://download.pytorch.org/whl/cu130",
        },
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "--extra-index-url https://download.pytorch.org/whl/cu130 sglang==0.5.23"
        ],
    ),
    op_case(
        venv_packages,
        "index-credentials-reach-uv-through-0600-files-not-its-command-line",
        {PythonPackages: {}},
        {
            "venv": VENV,
            "requirements": {"sglang": "0.5.23"},
            "index_url": CREDENTIALS_INDEX,
            "extra_index_url": CREDENTIALS_TORCH_INDEX,
        },
        commands=[
            *credentials_uploads("index-url", "extra-index-url"),
            f"{from_file('UV_INDEX_URL', 'index-url')} "
            f"{from_file('UV_EXTRA_INDEX_URL', 'extra-index-url')} "
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python sglang==0.5.23",
        ],
    ),
    op_case(
        venv_packages,
        "only-the-index-with-credentials-leaves-the-command-line",
        {PythonPackages: {}},
        {
            "venv": VENV,
            "requirements": {"sglang": "0.5.23"},
            "index_url": INDEX,
            "extra_index_url": CREDENTIALS_TORCH_INDEX,
        },
        commands=[
            *credentials_uploads("extra-index-url"),
            f"{from_file('UV_EXTRA_INDEX_URL', 'extra-index-url')} "
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.23",
        ],
    ),
    op_case(
        venv_packages,
        "at-the-pin-is-a-noop",
        {PythonPackages: {"sglang": "0.5.23"}},
        {"venv": VENV, "requirements": {"sglang": "0.5.23"}, "index_url": INDEX},
        noops=[f"{VENV} has sglang"],
    ),
    # -- flash-attn ---------------------------------------------------------------------------
    op_case(
        flash_attn_built,
        "build-carries-the-plan-and-keeps-the-log",
        BUILD_FACTS,
        BUILD_ARGS,
        commands=[flash_attn_build(archs_export="90", archs="90")],
    ),
    op_case(
        flash_attn_built,
        "archs-from-the-inventory-win",
        BUILD_FACTS,
        {**BUILD_ARGS, "archs_override": ["90", "120"]},
        commands=[flash_attn_build(archs_export="'90;120'", archs="90;120")],
    ),
    op_case(
        flash_attn_built,
        "index-credentials-reach-the-build-through-a-0600-file",
        BUILD_FACTS,
        {**BUILD_ARGS, "index_url": CREDENTIALS_INDEX},
        commands=[
            *credentials_uploads("index-url"),
            f"{from_file('UV_INDEX_URL', 'index-url')} "
            + flash_attn_build(archs_export="90", archs="90", index_args=""),
        ],
    ),
    op_case(
        flash_attn_built,
        "at-the-pin-built-for-the-gpus-is-a-noop",
        {**INSTALLED, JsonRecord: record_of(["90"])},
        BUILD_ARGS,
        noops=["flash-attn 2.8.3 is installed, built for 90 (the GPUs' 90)"],
    ),
    op_case(
        flash_attn_built,
        "a-build-for-more-than-the-gpus-is-a-noop",
        {**INSTALLED, JsonRecord: record_of(["90", "120"])},
        BUILD_ARGS,
        noops=["flash-attn 2.8.3 is installed, built for 90, 120 (the GPUs' 90)"],
    ),
    op_case(
        flash_attn_built,
        "90a-kernels-cover-9.0-gpus",
        {**INSTALLED, JsonRecord: record_of(["90a"])},
        BUILD_ARGS,
        noops=["flash-attn 2.8.3 is installed, built for 90a (the GPUs' 90)"],
    ),
    op_case(
        flash_attn_built,
        "a-record-from-before-archs-were-recorded-is-read-from-its-env",
        {**INSTALLED, JsonRecord: {"version": "2.8.3", "env": {"FLASH_ATTN_CUDA_ARCHS": "90"}}},
        BUILD_ARGS,
        noops=["flash-attn 2.8.3 is installed, built for 90 (the GPUs' 90)"],
    ),
    op_case(
        flash_attn_built,
        "no-gpus-reported-leaves-a-recorded-build-alone",
        {**INSTALLED, NvidiaGpus: [], JsonRecord: record_of(["90"])},
        BUILD_ARGS,
        noops=["flash-attn 2.8.3 is installed, built for 90 (no GPUs reported to check against)"],
    ),
    # -- the same version, built again for GPUs of another architecture -----------------------
    op_case(
        flash_attn_built,
        "gpus-the-build-has-no-kernels-for-rebuild-it",
        {**INSTALLED, NvidiaGpus: [gpu("12.0")], JsonRecord: record_of(["90"])},
        BUILD_ARGS,
        commands=[flash_attn_build(archs_export="120", archs="120")],
    ),
    op_case(
        flash_attn_built,
        "no-record-of-what-it-was-built-for-rebuilds",
        {**INSTALLED, JsonRecord: None},
        BUILD_ARGS,
        commands=[flash_attn_build(archs_export="90", archs="90")],
    ),
    op_case(
        flash_attn_built,
        "changed-inventory-archs-rebuild",
        {**INSTALLED, JsonRecord: record_of(["90"])},
        {**BUILD_ARGS, "archs_override": ["90", "120"]},
        commands=[flash_attn_build(archs_export="'90;120'", archs="90;120")],
    ),
    op_case(
        flash_attn_built,
        "inventory-archs-as-built-are-a-noop-whatever-the-gpus",
        {**INSTALLED, NvidiaGpus: [gpu("12.0")], JsonRecord: record_of(["90", "120"])},
        {**BUILD_ARGS, "archs_override": ["120", "90"]},
        noops=["flash-attn 2.8.3 is installed, built for 90, 120 (flash_attn_cuda_archs)"],
    ),
]


@pytest.mark.parametrize(OP_CASE_FIELDS, CASES)
def test_operation_yields_exactly(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


def test_missing_requirements():
    installed = {"sglang": "0.5.22", "flash-attn": "2.8.3", "ninja": "1.13.0"}
    requirements = {"sglang": "0.5.23", "flash_attn": "2.8.3", "ninja": None, "psutil": None}
    assert missing_requirements(installed, requirements) == ["sglang==0.5.23", "psutil"]


def test_no_gpus_yet_is_a_pending_change_then_a_clear_error():
    facts = {**BUILD_FACTS, NvidiaGpus: []}
    # Change detection runs before this deploy installs the driver: a change is pending.
    assert run_operation(flash_attn_built, facts, executing=False, **BUILD_ARGS) == (
        ["true 'build flash-attn 2.8.3 for the GPUs nvidia-smi will report'"],
        [],
    )
    with pytest.raises(OperationError, match="set flash_attn_cuda_archs"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)


def test_no_memory_for_one_job_is_refused():
    facts = {**BUILD_FACTS, MemoryInfo: {"total_kb": 8 * GB, "available_kb": 4 * GB}}
    with pytest.raises(BuildPlanError, match="not even one flash-attn compile job fits"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)
