"""Command generation of the Python environment and flash-attn roles from fact inputs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.hardware import Cpus

from checks.facts import JsonRecord, MemoryInfo, NvidiaGpus, PythonPackages, PythonVersion
from pyinfra_sglang.python_env.flash_attn_build_plan import BuildPlanError
from pyinfra_sglang.python_env.python_stack import install_plan
from roles.flash_attn import flash_attn_built
from roles.python_env import (
    missing_requirements,
    python_venv,
    sglang_installed,
    uv_installed,
    venv_packages,
)
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
# A venv holding SGLang 0.5.23's stack, torch's builds from PyTorch's cu130 index.
STACK_0_5_23 = {
    "torch": "2.14.1+cu130",
    "torchvision": "0.29.1+cu130",
    "torchaudio": "2.11.0+cu130",
    "sglang": "0.5.23",
    "sglang-kernel": "0.4.10",
}
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
BUILD_STATUS = "/var/log/pyinfra-sglang/flash-attn-2.8.3-build.status"
BUILD_UNIT = "pyinfra-sglang-flash-attn-build.service"
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
    archs_export: str, archs: str, index_args: str = f"--index-url {INDEX}", prefix: str = ""
) -> list[str]:
    """The build of flash-attn 2.8.3 on BUILD_FACTS' host: 16 cores, 64 GB available: 48 GB
    bound -> 9 threads of 5 GB -> 3 jobs x 3 threads. Started in a transient unit (unless
    one runs already), uv -v so the log shows ninja's steps; the controller then waits for
    it, printing progress (the FunctionCommand). The script keeps the log, records the build
    and leaves its exit status for the wait to read."""
    index_args = f"{index_args} " if index_args else ""
    wheels = "/var/lib/pyinfra-sglang/wheels/flash-attn-2.8.3"
    pip = f"{VENV}/bin/python -m pip install --disable-pip-version-check --no-cache-dir"
    script = (
        f"{prefix}start=$(date +%s); "
        f"if rm -rf {wheels}.new && mkdir -p {wheels}.new && "
        "env MAX_JOBS=3 NVCC_THREADS=3 "
        f"FLASH_ATTN_CUDA_ARCHS={archs_export} FLASH_ATTENTION_FORCE_BUILD=TRUE "
        "CUDA_HOME=/usr/local/cuda-13.1 PATH=/usr/local/cuda-13.1/bin:$PATH "
        f"{VENV}/bin/python -m pip wheel -v --disable-pip-version-check --no-deps "
        f"--no-build-isolation --no-cache-dir --wheel-dir {wheels}.new "
        f"{index_args}flash-attn==2.8.3 > {BUILD_LOG} 2>&1 && "
        f"wheel=$(ls {wheels}.new/flash_attn-*.whl) && "
        f'{{ {pip} {index_args}--no-deps --force-reinstall "$wheel" && '
        f'{pip} {index_args}"$wheel"; }} >> {BUILD_LOG} 2>&1 && '
        f"rm -rf {wheels} && mv {wheels}.new {wheels}; "
        f'then wheel={wheels}/"$(basename "$wheel")"; sha=$(sha256sum "$wheel" | cut -d" " -f1); '
        "printf "
        '\'{"version": %s, "seconds": %d, "log": %s, "archs": %s, "env": %s, '
        '"wheel": "%s", "sha256": "%s"}\\n\' '
        f'\'"2.8.3"\' "$(( $(date +%s) - start ))" \'"{BUILD_LOG}"\' '
        f"'{json.dumps(archs.split(';'))}' "
        '\'{"CUDA_HOME": "/usr/local/cuda-13.1", "FLASH_ATTENTION_FORCE_BUILD": "TRUE", '
        f'"FLASH_ATTN_CUDA_ARCHS": "{archs}", "MAX_JOBS": "3", "NVCC_THREADS": "3"}}\' '
        '"$wheel" "$sha" > /var/log/pyinfra-sglang/flash-attn-2.8.3-build.json; rc=0; '
        "else rc=$?; fi; "
        f"echo $rc > {BUILD_STATUS}"
    )
    return [
        "mkdir -p /var/log/pyinfra-sglang && "
        f"if ! systemctl is-active --quiet {BUILD_UNIT}; then rm -f {BUILD_STATUS} && "
        f"{{ systemctl reset-failed {BUILD_UNIT} 2>/dev/null; true; }} && "
        "for try in 1 2 3 4 5; do "
        f"systemd-run --quiet --unit={BUILD_UNIT} --setenv=HOME=/root /bin/sh -c "
        # systemd expands '$' in a unit's command line: each is doubled, "$$" being one.
        f"{shlex.quote(script.replace('$', '$$'))} && break; [ $try = 5 ] && exit 1; "
        f"{{ systemctl stop {BUILD_UNIT}; systemctl reset-failed {BUILD_UNIT}; }} 2>/dev/null; "
        "sleep 1; done; fi",
        "FunctionCommand(_wait_for_build, ('2.8.3', None), {})",
    ]


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
    # -- SGLang after torch's CUDA build, each from one index ----------------------------------
    op_case(
        sglang_installed,
        "torch-from-its-index-alone-then-sglang-from-pypi-alone",
        {PythonPackages: {}},
        {"venv": VENV, "plan": install_plan("0.5.23", "13.1", INDEX)},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "--index-url https://download.pytorch.org/whl/cu130 "
            "torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.0",
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.23 sglang-kernel==0.4.10",
        ],
    ),
    op_case(
        sglang_installed,
        "a-cuda-12-kernel-on-pypi-comes-from-sglangs-cuda-13-index",
        {PythonPackages: {}},
        {"venv": VENV, "plan": install_plan("0.5.9", "13.1", INDEX)},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "--index-url https://download.pytorch.org/whl/cu130 "
            "torch==2.9.1 torchvision==0.24.1 torchaudio==2.9.1",
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "--index-url https://docs.sglang.io/whl/cu130 sgl-kernel==0.3.21+cu130",
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.9",
        ],
    ),
    op_case(
        sglang_installed,
        "on-cuda-12-the-pypi-kernel-fits",
        {PythonPackages: {}},
        {"venv": VENV, "plan": install_plan("0.5.9", "12.9", INDEX)},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "--index-url https://download.pytorch.org/whl/cu129 "
            "torch==2.9.1 torchvision==0.24.1 torchaudio==2.9.1",
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.9 sgl-kernel==0.3.21",
        ],
    ),
    op_case(
        sglang_installed,
        "a-changed-sglang-pin-with-the-same-torch-installs-only-sglang",
        {PythonPackages: {**STACK_0_5_23, "sglang": "0.5.22", "sglang-kernel": "0.4.9"}},
        {"venv": VENV, "plan": install_plan("0.5.23", "13.1", INDEX)},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.23 sglang-kernel==0.4.10",
        ],
    ),
    op_case(
        sglang_installed,
        "pypis-cuda-12-kernel-left-by-an-older-deploy-is-replaced-by-the-cuda-13-build",
        {
            PythonPackages: {
                "torch": "2.9.1+cu130",
                "torchvision": "0.24.1+cu130",
                "torchaudio": "2.9.1+cu130",
                "sgl-kernel": "0.3.21",
                "sglang": "0.5.9",
            }
        },
        {"venv": VENV, "plan": install_plan("0.5.9", "13.1", INDEX)},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "--index-url https://docs.sglang.io/whl/cu130 sgl-kernel==0.3.21+cu130",
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "sglang==0.5.9",
        ],
    ),
    op_case(
        sglang_installed,
        "index-credentials-reach-uv-through-0600-files-not-its-command-line",
        {PythonPackages: {}},
        {
            "venv": VENV,
            "plan": install_plan("0.5.23", "13.1", CREDENTIALS_INDEX, CREDENTIALS_TORCH_INDEX),
        },
        commands=[
            *credentials_uploads("index-url"),
            f"{from_file('UV_INDEX_URL', 'index-url')} "
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --no-deps "
            "torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.0",
            *credentials_uploads("index-url"),
            f"{from_file('UV_INDEX_URL', 'index-url')} "
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python "
            "sglang==0.5.23 sglang-kernel==0.4.10",
        ],
    ),
    op_case(
        sglang_installed,
        "at-the-pins-any-build-of-the-torch-release-is-a-noop",
        {PythonPackages: STACK_0_5_23},
        {"venv": VENV, "plan": install_plan("0.5.23", "13.1", INDEX)},
        noops=[
            f"{VENV} has torch 2.14.1+cu130, torchvision 0.29.1+cu130, torchaudio 2.11.0+cu130, "
            "sglang 0.5.23, sglang-kernel 0.4.10"
        ],
    ),
    # -- the router and build tools: one index, exactly the pins ------------------------------
    op_case(
        venv_packages,
        "changed-pin-installs-exactly-that-package",
        {PythonPackages: {"smg": "1.12.0", "torch": "2.14.1+cu130"}},
        {"venv": VENV, "requirements": {"smg": "1.13.0"}, "index_url": INDEX},
        commands=[
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python --index-url {INDEX} "
            "smg==1.13.0"
        ],
    ),
    op_case(
        venv_packages,
        "index-credentials-reach-uv-through-0600-files-not-its-command-line",
        {PythonPackages: {}},
        {"venv": VENV, "requirements": {"smg": "1.13.0"}, "index_url": CREDENTIALS_INDEX},
        commands=[
            *credentials_uploads("index-url"),
            f"{from_file('UV_INDEX_URL', 'index-url')} "
            f"/opt/sglang/uv/bin/uv pip install --python {VENV}/bin/python smg==1.13.0",
        ],
    ),
    op_case(
        venv_packages,
        "at-the-pin-is-a-noop",
        {PythonPackages: {"smg": "1.13.0"}},
        {"venv": VENV, "requirements": {"smg": "1.13.0"}, "index_url": INDEX},
        noops=[f"{VENV} has smg"],
    ),
    # -- flash-attn ---------------------------------------------------------------------------
    op_case(
        flash_attn_built,
        "build-carries-the-plan-and-keeps-the-log",
        BUILD_FACTS,
        BUILD_ARGS,
        commands=flash_attn_build(archs_export="90", archs="90"),
    ),
    op_case(
        flash_attn_built,
        "archs-from-the-inventory-win",
        BUILD_FACTS,
        {**BUILD_ARGS, "archs_override": ["90", "120"]},
        commands=flash_attn_build(archs_export="'90;120'", archs="90;120"),
    ),
    op_case(
        flash_attn_built,
        "index-credentials-reach-the-build-through-a-0600-file",
        BUILD_FACTS,
        {**BUILD_ARGS, "index_url": CREDENTIALS_INDEX},
        commands=[
            *credentials_uploads("index-url"),
            *flash_attn_build(
                archs_export="90",
                archs="90",
                index_args="",
                prefix=f"{from_file('PIP_INDEX_URL', 'index-url')} ",
            ),
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
        commands=flash_attn_build(archs_export="120", archs="120"),
    ),
    op_case(
        flash_attn_built,
        "no-record-of-what-it-was-built-for-rebuilds",
        {**INSTALLED, JsonRecord: None},
        BUILD_ARGS,
        commands=flash_attn_build(archs_export="90", archs="90"),
    ),
    op_case(
        flash_attn_built,
        "changed-inventory-archs-rebuild",
        {**INSTALLED, JsonRecord: record_of(["90"])},
        {**BUILD_ARGS, "archs_override": ["90", "120"]},
        commands=flash_attn_build(archs_export="'90;120'", archs="90;120"),
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
    # Never left to flash-attn 2.8.3's own default (its setup.py: "80;90;100;120").
    with pytest.raises(OperationError, match=r"set flash_attn_cuda_archs.*\(80;90;100;120\)"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)


def test_no_memory_for_one_job_is_refused():
    facts = {**BUILD_FACTS, MemoryInfo: {"total_kb": 8 * GB, "available_kb": 4 * GB}}
    with pytest.raises(BuildPlanError, match="not even one flash-attn compile job fits"):
        run_operation(flash_attn_built, facts, **BUILD_ARGS)


# -- the wait for the build: a progress line a minute, the log's tail on failure -------------

FIXTURE_LOG = (
    Path(__file__).resolve().parents[1] / "fixtures" / "flash-attn" / "uv-verbose-build.log"
)


class FakeBuildHost:
    """A host whose build unit runs for ``polls`` polls (2 s each), its log growing a ninja
    step per poll, then ends with exit status ``status``."""

    print_prefix = "[gpu-01] "

    def __init__(self, polls: int, status: str):
        self.polls, self.status, self.asked = polls, status, 0
        self.lines = FIXTURE_LOG.read_text().splitlines()
        self.now = 0.0

    def run(self, host, command):
        assert host is self
        if command.startswith("systemctl is-active"):
            self.asked += 1
            return self.asked <= self.polls, ""
        if command.startswith("tail -c"):
            return True, "\n".join(self.lines[: 20 + self.asked]) + "\n"
        if command.startswith("cat "):
            return True, self.status
        if command.startswith("tail -n 40"):
            return True, "\n".join(self.lines[-40:])
        raise AssertionError(command)


def wait_with(monkeypatch, fake: FakeBuildHost) -> tuple[bool, list[tuple[str, str]]]:
    import roles.flash_attn as role

    said = []
    monkeypatch.setattr(role, "run_on_host", fake.run)
    monkeypatch.setattr(role.time, "monotonic", lambda: fake.now)
    monkeypatch.setattr(role.time, "sleep", lambda s: setattr(fake, "now", fake.now + s))
    monkeypatch.setattr(role.logger, "info", lambda m: said.append(("info", m)))
    monkeypatch.setattr(role.logger, "error", lambda m: said.append(("error", m)))
    return role._wait_for_build(None, fake, "2.8.3"), said


def test_the_wait_prints_a_progress_line_every_minute(monkeypatch):
    ok, said = wait_with(monkeypatch, FakeBuildHost(polls=95, status="0\n"))
    assert ok
    lines = [m for level, m in said if level == "info"]
    # A poll each 2 s, a ninja step more in the log each poll (the fixture's ninja lines
    # start at its 21st line, a warning after [5/73]): progress at 60, 120 and 180 s; the
    # unit ends at the 96th poll. 30 steps in the minute after ninja showed: 2 s a step.
    assert lines == [
        "[gpu-01] flash-attn 2.8.3: building for 1 min 00 s; compile steps 29/73 (40%)",
        "[gpu-01] flash-attn 2.8.3: building for 2 min 00 s; compile steps 59/73 (81%), "
        "about 28 s left",
        "[gpu-01] flash-attn 2.8.3: building for 3 min 00 s; compile steps 73/73 (100%), "
        "about 0 s left",
        "[gpu-01] flash-attn 2.8.3: built in 3 min 12 s",
    ]


def test_a_failed_build_shows_its_status_and_the_log_tail(monkeypatch):
    ok, said = wait_with(monkeypatch, FakeBuildHost(polls=3, status="1\n"))
    assert not ok
    [(level, message)] = said
    assert level == "error"
    assert message.startswith(
        "[gpu-01] flash-attn 2.8.3 build failed after 8 s (exit status 1); "
        f"log: {BUILD_LOG}; its last lines:\n"
    )
    assert message.endswith(" + flash-attn==2.8.3")


def test_a_build_unit_gone_without_a_status_says_so(monkeypatch):
    ok, said = wait_with(monkeypatch, FakeBuildHost(polls=0, status=""))
    assert not ok and "(the build unit ended unfinished)" in said[0][1]
