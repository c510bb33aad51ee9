"""A host pyinfra cannot reach is named with what to do about it, even when no host is left
and the run ends in "No hosts remaining!" before any deploy file is loaded: config.py, which
pyinfra runs before it connects, installs the advice (checks/run_summary.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pyinfra_sglang.access.connect_advice import connect_advice, unreachable_reason

ROOT = Path(__file__).resolve().parents[2]

# The connector's messages, as pyinfra 3.x words them (pyinfra/connectors/ssh.py wraps each
# exception as "<what> (<the exception>)"; sshuserclient/client.py's StrictPolicy).
CASES = [
    (
        "SSH error (StrictPolicy: No host key for 10.0.0.11 found in known_hosts)",
        "docs/security.md#ssh-host-keys",
    ),
    ("SSH host key error (Host key for 10.0.0.11 does not match.)", "changed"),
    ("Could not resolve hostname ([Errno -2] Name or service not known)", "ssh_hostname"),
    ("Authentication error (key: ~/.ssh/id_ed25519)", "ssh_user"),
    ("Could not connect ([Errno None] Unable to connect to port 22 on 10.0.0.11)", "sshd"),
]


@pytest.mark.parametrize(("error", "said"), CASES)
def test_each_connect_error_gets_its_advice(error, said):
    advice = connect_advice(error)
    assert advice is not None and said in advice
    assert unreachable_reason(error) == f"{error}; {advice}"


def test_an_unknown_error_stands_alone():
    assert connect_advice("EOF error ()") is None
    assert unreachable_reason("EOF error ()") == "EOF error ()"


def test_a_run_with_no_host_left_still_says_what_to_do(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        f'hosts = [("gpu-a", {{"ssh_hostname": "127.0.0.1", "ssh_port": {port}, '
        '"ssh_strict_host_key_checking": "yes"})]\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploy/audit.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "No hosts remaining!" in output
    assert "[gpu-a] unreachable: nothing answered SSH on its address and port" in output
