"""validate says, before any deploy, that pyinfra would not connect to a host whose key the
inventory's known_hosts file lacks (ssh_strict_host_key_checking = yes), and how to add it.
The file is read by the real ssh-keygen: plain, hashed and [host]:port entries."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang.access.known_hosts import known_host_gap, ssh_name
from pyinfra_sglang.inventory import load_inventory_file, validate_inventory


@pytest.fixture
def public_key(tmp_path) -> str:
    key = tmp_path / "host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30
    )
    algorithm, blob = (tmp_path / "host_key.pub").read_text().split()[:2]
    return f"{algorithm} {blob}"


def test_a_listed_host_passes_and_others_are_named(tmp_path, public_key):
    known = tmp_path / "known_hosts"
    known.write_text(f"gpu-01.example.internal,10.0.0.11 {public_key}\n")
    assert known_host_gap(known, "gpu-01.example.internal") is None
    assert known_host_gap(known, "10.0.0.11") is None
    assert known_host_gap(known, "gpu-02.example.internal") == (
        f"{known} holds no key for gpu-02.example.internal"
    )


def test_another_port_is_looked_up_as_openssh_stores_it(tmp_path, public_key):
    known = tmp_path / "known_hosts"
    known.write_text(f"[10.0.0.11]:2222 {public_key}\n")
    assert ssh_name("10.0.0.11", 2222) == "[10.0.0.11]:2222"
    assert known_host_gap(known, "10.0.0.11", 2222) is None
    assert known_host_gap(known, "10.0.0.11", 22) is not None


def test_hashed_entries_are_matched(tmp_path, public_key):
    known = tmp_path / "known_hosts"
    known.write_text(f"gpu-01.example.internal {public_key}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "gpu-01" not in known.read_text()  # hashed now
    assert known_host_gap(known, "gpu-01.example.internal") is None


def test_a_missing_file_is_named_with_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert known_host_gap("known_hosts", "gpu-01") == (
        f"the file {tmp_path / 'known_hosts'} does not exist"
    )


def _warnings(tmp_path: Path, host_data: str) -> list[str]:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f'hosts = [("gpu-01.example.internal", {host_data})]\n')
    warnings: list[str] = []
    validate_inventory(load_inventory_file(str(inventory)), warn=warnings.append)
    return [line for line in warnings if "known_hosts" in line]


def test_validate_warns_about_a_host_the_file_lacks_and_says_how_to_add_it(tmp_path, public_key):
    known = tmp_path / "known_hosts"
    known.write_text(f"gpu-02.example.internal {public_key}\n")
    data = (
        '{"ssh_strict_host_key_checking": "yes", '
        f'"ssh_known_hosts_file": "{known}", "ssh_port": 2200}}'
    )
    [warning] = _warnings(tmp_path, data)
    assert warning.startswith("warning: host gpu-01.example.internal: ssh_known_hosts_file")
    assert "holds no key for [gpu-01.example.internal]:2200" in warning
    assert "ssh-keyscan -t ed25519 -p 2200 gpu-01.example.internal" in warning
    assert "docs/security.md#ssh-host-keys" in warning
    # Once the key is there: nothing to say.
    known.write_text(f"[gpu-01.example.internal]:2200 {public_key}\n")
    assert _warnings(tmp_path, data) == []
