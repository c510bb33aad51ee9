"""Index URLs with credentials (https://user:token@mirror/simple) never reach a command line:
``ps`` shows every process's argv to every user of the host, and pyinfra's HiddenValue masks
only pyinfra's own output. The URL goes to a 0600 file in a 0700 folder, the shell reads it
into the variable the tool reads (``UV_INDEX_URL``, ``PIP_INDEX_URL``, ...) and removes it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from unittest.mock import patch

import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.facts.hardware import Cpus

from checks.facts import MemoryInfo, NvidiaGpus, PythonPackages
from roles import flash_attn, python_env
from tests.unit.ophelper import transient_unit_script
from tests.unit.test_command_quoting import yielded

PASSWORD = "s3cret-Pa55"
TOKEN = "t0ken-Xy"
INDEX = f"https://deploy:{PASSWORD}@mirror.internal/simple"
TORCH_INDEX = f"https://deploy:{TOKEN}@mirror.internal/torch/cu130"
GB = 1024**2  # kB
BUILD_FACTS = {
    PythonPackages: {},
    NvidiaGpus: [{"index": "0", "name": "NVIDIA H200", "compute_cap": "9.0"}],
    Cpus: 16,
    MemoryInfo: {"total_kb": 70 * GB, "available_kb": 64 * GB},
}


def uv_install():
    return yielded(python_env.uv_installed, {PythonPackages: {}}, version="0.13.9", index_url=INDEX)


def sglang_install():
    return yielded(
        python_env.venv_packages,
        {PythonPackages: {}},
        venv="/opt/sglang/venv",
        requirements={"sglang": "0.5.23"},
        index_url=INDEX,
        extra_index_url=TORCH_INDEX,
    )


def flash_attn_build():
    return yielded(
        flash_attn.flash_attn_built,
        BUILD_FACTS,
        venv="/opt/sglang/venv",
        version="2.8.3",
        archs_override=None,
        memory_fraction=0.75,
        cuda_home="/usr/local/cuda-13.1",
        index_url=INDEX,
    )


OPERATIONS = {
    "uv-with-pip": (uv_install, {"index-url": INDEX}),
    "sglang-with-uv": (sglang_install, {"index-url": INDEX, "extra-index-url": TORCH_INDEX}),
    "flash-attn-build": (flash_attn_build, {"index-url": INDEX}),
}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_command_holds_the_credentials_they_go_to_0600_files(operation):
    make, urls = OPERATIONS[operation]
    commands = make()
    for command in commands:
        if isinstance(command, StringCommand):
            raw = command.get_raw_value()  # what the host's shell gets
            assert PASSWORD not in raw and TOKEN not in raw, raw
    uploads = [c for c in commands if isinstance(c, FileUploadCommand)]
    folder = python_env.CREDENTIALS_DIR
    assert {Path(u.dest).name: u.src.getvalue() for u in uploads} == urls
    assert all(Path(u.dest).parent == Path(folder) for u in uploads)
    assert PASSWORD not in repr(uploads) and TOKEN not in repr(uploads)  # pyinfra prints those
    # The folder is root's alone before anything is written to it; each file is 0600 before
    # the command that reads it runs.
    shown = [str(c) for c in commands]
    assert shown.index(f"install -d -m 700 {folder}") < shown.index(repr(uploads[0]))
    for upload in uploads:
        chmod = shown.index(f"chmod 600 {upload.dest}")
        assert shown.index(repr(upload)) < chmod < len(shown) - 1


TOOL = """#!/bin/sh
# Records what ps would show of it and of the shell that ran it, and what it was given.
tr '\\0' ' ' < /proc/$$/cmdline > {out}/tool.argv
tr '\\0' ' ' < /proc/$PPID/cmdline > {out}/shell.argv
env > {out}/tool.env
"""


def run_on_this_machine(commands: list, folder: Path) -> subprocess.CompletedProcess:
    """Upload by writing the file, run each shell command with /bin/sh -c, as pyinfra does."""
    for command in commands:
        if isinstance(command, FileUploadCommand):
            Path(command.dest).write_text(command.src.getvalue())
            continue
        if isinstance(command, FunctionCommand):  # the controller's wait for the build
            continue
        raw = command.get_raw_value()
        if "systemd-run" in raw:  # the flash-attn build's transient unit: run its script
            raw = transient_unit_script(raw)
        result = subprocess.run(["/bin/sh", "-c", raw], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize(
    ("operation", "tool", "variables"),
    [
        ("uv-with-pip", "pip", {"PIP_INDEX_URL": INDEX}),
        ("sglang-with-uv", "uv", {"UV_INDEX_URL": INDEX, "UV_EXTRA_INDEX_URL": TORCH_INDEX}),
        # pip, run by the venv's python, builds the wheel.
        ("flash-attn-build", "python", {"PIP_INDEX_URL": INDEX}),
    ],
)
def test_the_tool_reads_the_urls_from_its_environment_and_ps_never_shows_them(
    tmp_path, operation, tool, variables
):
    folder = tmp_path / "credentials"
    prefix = tmp_path / "uv"
    (prefix / "bin").mkdir(parents=True)
    fake = prefix / "bin" / tool
    fake.write_text(TOOL.format(out=tmp_path))
    fake.chmod(0o755)
    logs = (str(tmp_path / "build.log"), str(tmp_path / "build.json"))
    with (
        patch.object(python_env, "CREDENTIALS_DIR", str(folder)),
        patch.object(python_env, "uv_prefix", return_value=str(prefix)),
        patch.object(flash_attn, "venv_python", return_value=str(prefix / "bin" / "python")),
        patch.object(flash_attn, "build_log_paths", return_value=logs),
        patch.object(flash_attn, "wheel_folder", return_value=str(tmp_path / "wheels")),
    ):
        run_on_this_machine(OPERATIONS[operation][0](), folder)
    seen = {name: (tmp_path / name).read_text() for name in ("tool.argv", "shell.argv", "tool.env")}
    assert {"install", "wheel"} & set(seen["tool.argv"].split()), seen["tool.argv"]
    assert "sh -c" in seen["shell.argv"]
    for secret in (PASSWORD, TOKEN):
        assert secret not in seen["tool.argv"] and secret not in seen["shell.argv"]
    environment = dict(line.split("=", 1) for line in seen["tool.env"].splitlines() if "=" in line)
    assert {name: environment.get(name) for name in variables} == variables
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert list(folder.iterdir()) == []  # each file removed once read


def test_under_sudo_the_upload_goes_through_a_0600_file_nobody_can_guess():
    # pyinfra uploads as the SSH user to /tmp/pyinfra-<sha1 of the destination> (predictable,
    # 0644) and copies with sudo: each upload names a staging file made 0600 beforehand, as
    # the SSH user, at a random name, and removes it after.
    first, second = python_env.index_options("uv", INDEX), python_env.index_options("uv", INDEX)
    for options in (first, second):
        commands = list(options.uploads)
        [upload] = [c for c in commands if isinstance(c, FileUploadCommand)]
        staging = upload.remote_temp_filename
        assert staging.startswith(python_env.STAGING_PREFIX) and len(staging) > 40
        made, removed = commands[commands.index(upload) - 1], commands[commands.index(upload) + 1]
        assert made.get_raw_value() == f"install -m 600 /dev/null {staging}"
        assert removed.get_raw_value() == f"rm -f {staging}"
        for command in (made, removed):
            assert command.connector_arguments == python_env.AS_THE_SSH_USER
    names = [
        next(c for c in o.uploads if isinstance(c, FileUploadCommand)).remote_temp_filename
        for o in (first, second)
    ]
    assert names[0] != names[1]
