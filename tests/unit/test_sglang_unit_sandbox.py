"""The rendered sglang.service runs the server as its own user, sandboxed: not root, the file
system read-only but the cache folders, its own /tmp, no home folders, no kernel tunables or
modules, no privilege gain; GPU devices still reachable."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pyinfra_sglang.serving.placement import GpuSet, place
from pyinfra_sglang.serving.profiles import load_profile
from pyinfra_sglang.serving.render import (
    EnvSpec,
    ServiceSpec,
    cache_dirs,
    environment,
    render_service_files,
)

VENV = "/opt/sglang/venv"


def files(**spec_fields):
    gpus = GpuSet(count=2, memory_gb=141, arch="sm_90")
    spec = ServiceSpec(
        placement=place(load_profile("dense-bf16"), gpus, sglang_version="0.5.23"),
        host="127.0.0.1",
        port=30000,
        venv_path=VENV,
        **spec_fields,
    )
    return render_service_files(spec)


def settings(unit: str) -> dict[str, list[str]]:
    """Setting -> values in [Service], continuation lines joined."""
    section = unit.split("[Service]\n", 1)[1].split("\n[", 1)[0].replace("\\\n", " ")
    found: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, value = line.split("=", 1)
            found.setdefault(name, []).append(value)
    return found


def test_the_server_runs_as_its_own_user_never_root():
    service = settings(files()[0].content)
    assert service["User"] == ["sglang"] and service["Group"] == ["sglang"]
    # /dev/nvidia* 0660 root:video where a host restricts them (0666 by the driver's default).
    assert service["SupplementaryGroups"] == ["video"]


def test_the_sandbox_settings():
    service = settings(files()[0].content)
    for name, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "ProtectHome": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
    }.items():
        assert service[name] == [value], name
    # The GPUs are devices: a private /dev would hide them.
    assert "PrivateDevices" not in service and "DevicePolicy" not in service


def test_only_the_cache_folders_are_writable_and_they_are_the_env_files_folders():
    [paths] = settings(files()[0].content)["ReadWritePaths"]
    assert paths.split() == sorted(cache_dirs().values())
    env = environment(EnvSpec(VENV))
    assert {env[name] for name in cache_dirs()} == set(paths.split())


def test_a_cache_root_moves_both_the_env_files_folders_and_the_writable_ones():
    unit, env, _ = files(cache_root="/data/sglang")
    [paths] = settings(unit.content)["ReadWritePaths"]
    assert paths.split() == sorted(cache_dirs("/data/sglang").values())
    assert all(path.startswith("/data/sglang/") for path in paths.split())
    assert "HF_HOME=/data/sglang/huggingface" in env.content


def test_nvidia_uvm_is_created_with_full_privileges_before_the_sandboxed_start():
    service = settings(files()[0].content)
    # "+": outside the sandbox (NoNewPrivileges would stop the setuid nvidia-modprobe CUDA
    # calls); "-": a host without nvidia-modprobe starts the server anyway.
    assert service["ExecStartPre"] == ["-+/usr/bin/nvidia-modprobe -u -c 0"]
    assert service["ExecStart"][0].startswith(f"{VENV}/bin/python -m sglang.launch_server ")


def verify(tmp_path, content: str) -> list[str]:
    """What systemd-analyze says of a unit, but that its venv's python is missing here."""
    path = tmp_path / "sglang.service"
    path.write_text(content)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "--recursive-errors=no", str(path)],
        capture_output=True,
        text=True,
    )
    return [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and f"Command {VENV}/bin/python is not executable" not in line
    ]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_systemd_reads_the_unit_without_complaint(tmp_path):
    unit = files()[0].content
    assert verify(tmp_path, unit) == []
    # And it would say so: a misspelt setting is named.
    misspelt = unit.replace("ProtectSystem=", "ProtectSystm=")
    assert any("ProtectSystm" in line for line in verify(tmp_path, misspelt))
