"""apt on a busy host: fresh cloud images run unattended-upgrades at boot, holding dpkg's
locks and apt's lists lock for minutes. Every apt-get the roles run that installs or removes
waits for dpkg's locks (-o DPkg::Lock::Timeout, data/apt.toml) and keeps changed config
files; apt-get update, which never waits for its lock, is retried a bounded number of times."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from pyinfra.facts.deb import DebPackages

from checks.facts import KernelHeaders, Virtualization
from pyinfra_sglang import data
from roles.base import kernel_headers
from roles.common import packages_installed
from roles.nvidia_driver import driver_branch_pin, driver_packages_on_branch
from roles.nvidia_repo import keyring_installed
from tests.unit.test_command_quoting import shell_commands, words, yielded

ROLES = Path(__file__).resolve().parents[2] / "roles"
APT = data.apt()
# apt-get written into a command (not a word about it in a docstring).
APT_GET_CALL = re.compile(r"\bapt-get\s+(-|(install|remove|purge|update|upgrade|dist-upgrade)\b)")
SEPARATORS = {";", "&&", "||", "|", "&", "then", "else", "fi", "do", "done"}


def headers(lists: bool) -> dict:
    return {
        KernelHeaders: {
            "kernel_release": "6.1.0-27-amd64",
            "package": "linux-headers-6.1.0-27-amd64",
            "installed": False,
            "candidate": "6.1.115-1",
            "apt_lists_present": lists,
        },
        Virtualization: {"container": None, "vm": None},
    }


# Every operation of the roles that runs apt-get, on a host where it changes something.
APT_OPERATIONS = {
    "packages_installed": (packages_installed, {DebPackages: {}}, {"packages": ["dkms"]}),
    "kernel_headers": (kernel_headers, headers(lists=True), {}),
    "kernel_headers-without-lists": (kernel_headers, headers(lists=False), {}),
    "driver_branch_pin-swap": (
        driver_branch_pin,
        {DebPackages: {"nvidia-driver-pinning-595": ["595.58.03-1"]}},
        {"branch": 590},
    ),
    "driver_packages_on_branch": (
        driver_packages_on_branch,
        {DebPackages: {}},
        {"entries": [("nvidia-driver-cuda",)], "branch": 590},
    ),
    "keyring_installed": (
        keyring_installed,
        {DebPackages: {}},
        {
            "package": "cuda-keyring",
            "src": "https://mirror/cuda-keyring_1.1-1_all.deb",
            "sha256": "0" * 64,
            "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
            "keyring_path": "/usr/share/keyrings/cuda-archive-keyring.gpg",
            "download_dir": "/var/lib/pyinfra-sglang/downloads",
        },
    ),
}


def apt_get_calls(command: str) -> list[tuple[list[str], list[str]]]:
    """(words before, arguments) of each apt-get call in ``command``."""
    split = words(command)
    calls = []
    for index, word in enumerate(split):
        if word != "apt-get":
            continue
        start = index
        while start > 0 and split[start - 1] not in SEPARATORS:
            start -= 1
        end = index + 1
        while end < len(split) and split[end] not in SEPARATORS:
            end += 1
        calls.append((split[start:index], split[index + 1 : end]))
    return calls


@pytest.mark.parametrize("operation", APT_OPERATIONS)
def test_every_apt_get_waits_for_dpkgs_lock_and_keeps_changed_config_files(operation):
    op, facts, args = APT_OPERATIONS[operation]
    calls = [call for c in shell_commands(yielded(op, facts, **args)) for call in apt_get_calls(c)]
    changing = [(before, rest) for before, rest in calls if "update" not in rest]
    assert changing, calls
    for before, rest in changing:
        assert before == ["DEBIAN_FRONTEND=noninteractive"], (before, rest)
        options = " ".join(rest)
        assert f"-o DPkg::Lock::Timeout={APT.lock_timeout_s}" in options
        assert "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold" in options
        assert rest[0] == "-y" and "install" in rest


def fake_bin(tmp_path: Path, apt_failures: int) -> Path:
    """apt-get that fails ``apt_failures`` times then succeeds, and a sleep that records."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/apt-get.calls\n'
        f"calls=$(wc -l < {tmp_path}/apt-get.calls)\n"
        f'[ "$calls" -gt {apt_failures} ] || {{ echo "E: Could not get lock" >&2; exit 100; }}\n'
    )
    (folder / "sleep").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/sleep.calls\n')
    for program in ("apt-get", "sleep"):
        (folder / program).chmod(0o755)
    return folder


def run_update(tmp_path: Path, apt_failures: int) -> subprocess.CompletedProcess:
    [update, _install] = shell_commands(
        yielded(packages_installed, {DebPackages: {}}, packages=["dkms"])
    )
    folder = fake_bin(tmp_path, apt_failures)
    return subprocess.run(
        ["/bin/sh", "-c", update],
        env={"PATH": f"{folder}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_apt_get_update_is_retried_until_it_succeeds(tmp_path):
    result = run_update(tmp_path, apt_failures=2)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "apt-get.calls").read_text().splitlines() == ["update -q"] * 3
    delay = str(APT.update_retry_delay_s)
    assert (tmp_path / "sleep.calls").read_text().splitlines() == [delay, delay]
    assert f"apt-get update failed (attempt 1 of {APT.update_attempts})" in result.stderr


def test_apt_get_update_gives_up_after_its_attempts(tmp_path):
    attempts = APT.update_attempts
    result = run_update(tmp_path, apt_failures=attempts + 5)
    assert result.returncode == 100
    assert len((tmp_path / "apt-get.calls").read_text().splitlines()) == attempts
    assert f"apt-get update failed {attempts} times" in result.stderr


def test_the_roles_run_apt_only_through_the_common_helpers():
    """A new apt-get in a role goes through roles/common.py (apt_get, apt_install,
    apt_update, packages_installed), so it waits for the locks too."""
    offenders = []
    for path in sorted(ROLES.glob("*.py")):
        if path.name == "common.py":
            continue
        tree = ast.parse(path.read_text())
        # Docstrings are prose about apt (the roles reference is generated from them).
        docstrings = {
            id(body[0].value)
            for scope in ast.walk(tree)
            if isinstance(scope, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and (body := scope.body)
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            name = None
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "apt"
            ):
                name = f"apt.{node.attr}"
            elif isinstance(node, ast.Name) and node.id == "noninteractive_apt":
                name = node.id
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and APT_GET_CALL.search(node.value)
                and id(node) not in docstrings
            ):
                name = repr(node.value[:40])
            if name:
                offenders.append(f"{path.name}:{node.lineno}: {name}")
    assert offenders == []
