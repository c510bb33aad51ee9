"""The two set-ups of README: scripts/bootstrap.sh (the main job, also run on a production
GPU server to audit it) installs the SSH client, uv and the locked virtualenv and no test
machinery; scripts/bootstrap-tests.sh adds what only the tests need.

Each script runs for real, with dpkg-query saying nothing is installed, id saying a non-root
user (so the script names what it would install instead of calling apt-get) and uv recording
its calls: stand-ins on PATH for the system's tools, nothing installed here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What only the tests use: never on a GPU server through the main job's set-up.
TEST_ONLY = {"systemd-container", "debootstrap", "chromium", "prometheus", "gnupg", "iproute2"}


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run_setup(script: str, tmp_path: Path) -> tuple[set[str], list[str]]:
    """The apt packages ``script`` would install and the uv calls it made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "uv-calls"
    _stub(bin_dir, "dpkg-query", "exit 1")  # nothing installed
    _stub(bin_dir, "id", 'if [ "$1" = "-u" ]; then echo 1000; else exec /usr/bin/id "$@"; fi')
    _stub(bin_dir, "uv", f'echo "$*" >> {calls}')
    _stub(bin_dir, "apt-get", "echo apt-get must not run as a non-root user >&2; exit 99")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    named = re.findall(r"not installing (.+?);", done.stderr)
    packages = {package for line in named for package in line.split()}
    return packages, calls.read_text().splitlines() if calls.exists() else []


def test_the_main_jobs_setup_installs_no_test_machinery(tmp_path):
    packages, uv_calls = run_setup("scripts/bootstrap.sh", tmp_path)
    assert packages == {"openssh-client"}
    assert not packages & TEST_ONLY
    assert uv_calls == ["sync --locked"]


def test_the_tests_setup_adds_the_test_machinery(tmp_path):
    packages, uv_calls = run_setup("scripts/bootstrap-tests.sh", tmp_path)
    assert {"openssh-client", *TEST_ONLY, "openssl"} <= packages
    assert uv_calls == ["sync --locked"]


def test_readme_and_ci_use_each_setup_for_its_job():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/bootstrap.sh && uv run pyinfra -y @local deploy/audit.py" in readme
    assert "scripts/bootstrap-tests.sh && scripts/test.sh" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/bootstrap-tests.sh\n" in ci
