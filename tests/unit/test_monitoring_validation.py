"""The monitoring plan's refusals are inventory problems: `validate` (and host_config, on first
use) names the host, the field, the value and what is allowed before any host changes, not
roles/monitoring.py halfway through a run."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pyinfra_sglang.inventory import InventoryError, load_inventory_file, validate_inventory

SSH_YES = {"ssh_strict_host_key_checking": "yes"}
SERVER = {
    **SSH_YES,
    "monitoring_role": "server",
    "monitoring_grafana": False,
}
# Serving on the LAN with the key, /metrics open for the monitoring host to scrape.
GPU = {
    **SSH_YES,
    "sglang_host": "0.0.0.0",
    "sglang_metrics_public": True,
    "sglang_api_key_file": "secrets/sglang-api-key",
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secrets").mkdir()
    key = tmp_path / "secrets/sglang-api-key"
    key.write_text("k" * 32 + "\n")
    key.chmod(0o600)


def problems_of(folder: Path, hosts: dict[str, dict]):
    # A new file each time: pyinfra caches a compiled inventory by its file name.
    path = folder / f"inv{len(list(folder.glob('inv*.py')))}.py"
    entries = ", ".join(f"({name!r}, {data!r})" for name, data in hosts.items())
    path.write_text(f"gpus = [{entries}]\n")
    try:
        validate_inventory(load_inventory_file(str(path)), warn=lambda _: None)
    except InventoryError as error:
        return error.problems
    return []


def test_a_monitored_inventory_that_can_work_validates(tmp_path):
    hosts = {
        "mon": {**SERVER, **GPU, "ssh_hostname": "10.0.0.5"},
        "gpu-1": {**GPU, "ssh_hostname": "10.0.0.11"},
    }
    assert problems_of(tmp_path, hosts) == []


def test_two_monitoring_servers_are_refused_naming_the_second(tmp_path):
    hosts = {
        "mon-a": {**SERVER, **GPU, "ssh_hostname": "10.0.0.5"},
        "mon-b": {**SERVER, **GPU, "ssh_hostname": "10.0.0.6"},
    }
    [problem] = problems_of(tmp_path, hosts)
    assert (problem.host, problem.field, problem.value) == ("mon-b", "monitoring_role", "server")
    assert problem.source == "host data"
    assert "not 2 (mon-a, mon-b)" in problem.message
    assert "exactly one host" in problem.allowed


def test_a_loopback_exporter_on_another_host_is_refused(tmp_path):
    hosts = {
        "mon": {**SERVER, **GPU, "ssh_hostname": "10.0.0.5"},
        "gpu-1": {**GPU, "ssh_hostname": "10.0.0.11", "monitoring_exporter_address": "127.0.0.1"},
    }
    [problem] = problems_of(tmp_path, hosts)
    assert (problem.host, problem.field, problem.value) == (
        "gpu-1",
        "monitoring_exporter_address",
        "127.0.0.1",
    )
    assert "loopback" in problem.message and "mon" in problem.allowed
    assert "host gpu-1: monitoring_exporter_address = 127.0.0.1 (from host data)" in str(problem)


def test_every_unreachable_target_is_a_problem_of_its_own(tmp_path):
    hosts = {
        "mon": {**SERVER, **GPU, "ssh_hostname": "10.0.0.5"},
        # Bound to loopback (the default sglang_host): its /metrics is out of reach.
        "gpu-1": {**SSH_YES, "ssh_hostname": "10.0.0.11"},
        # A name, not an IP address, for its node exporter to listen on.
        "gpu-2": {**GPU, "ssh_hostname": "gpu-2.example.internal"},
    }
    found = {(p.host, p.field, p.value, p.source) for p in problems_of(tmp_path, hosts)}
    assert found == {
        ("gpu-1", "sglang_host", "127.0.0.1", "default"),
        ("gpu-2", "monitoring_exporter_address", "None", "default"),
    }


def test_without_a_monitoring_server_nothing_is_planned(tmp_path):
    # Loopback everywhere is fine when nobody scrapes.
    hosts = {"gpu-1": {**SSH_YES, "ssh_hostname": "10.0.0.11"}, "gpu-2": dict(SSH_YES)}
    assert problems_of(tmp_path, hosts) == []


def test_a_metrics_firewall_needs_the_servers_address(tmp_path):
    hosts = {
        "mon.example.internal": {**SERVER, **GPU},
        "gpu-1": {**GPU, "ssh_hostname": "10.0.0.11"},
    }
    [problem] = problems_of(tmp_path, hosts)
    assert (problem.host, problem.field, problem.value, problem.source) == (
        "mon.example.internal",
        "monitoring_scrape_address",
        "None",
        "default",
    )
    assert "gpu-1" in problem.message and "IP address" in problem.allowed
    given = {**hosts["mon.example.internal"], "monitoring_scrape_address": "10.0.0.5"}
    assert problems_of(tmp_path, {**hosts, "mon.example.internal": given}) == []


def test_a_metrics_firewall_is_refused_on_hosts_sharing_loopback(tmp_path):
    hosts = {
        "mon": {**SERVER, **GPU, "ssh_hostname": "127.0.0.11", "sglang_host": "127.0.0.11"},
        "gpu-1": {**GPU, "ssh_hostname": "127.0.0.12", "sglang_host": "127.0.0.12"},
    }
    problems = problems_of(tmp_path, hosts)
    assert {(p.host, p.field, p.value) for p in problems} == {
        ("mon", "monitoring_firewall", "True"),
        ("gpu-1", "monitoring_firewall", "True"),
    }
    off = {name: {**values, "monitoring_firewall": False} for name, values in hosts.items()}
    assert problems_of(tmp_path, off) == []


def _bad_password_file(folder: Path, kind: str) -> str:
    path = folder / f"grafana-{kind}"
    if kind == "missing":
        return str(path)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opened blocking, this waited for a writer forever
    elif kind == "device":
        return "/dev/zero"
    else:
        content = {
            "empty": b"",
            "two-lines": b"first\nsecond\n",
            "not-utf8": b"\xff\xfe pass\n",
            "control": b"pass\x1bword\n",
            "huge": b"x" * 5000,
        }[kind]
        path.write_bytes(content)
        path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "cannot read it: No such file or directory"),
        ("folder", "not a regular file"),
        ("fifo", "not a regular file"),
        ("device", "not a regular file"),
        ("empty", "empty"),
        ("two-lines", "more than one line"),
        ("not-utf8", "not UTF-8 text"),
        ("control", "non-printable"),
        ("huge", "larger than 4096 bytes"),
    ],
)
def test_grafanas_password_file_is_checked_before_any_host_changes(tmp_path, kind, reason):
    """Every one of these validated ok and failed, or hung, at the last role, after
    Prometheus and Grafana had changed the hosts (issue 46, M7)."""
    server = {**SERVER, **GPU, "ssh_hostname": "10.0.0.5", "monitoring_grafana": True}
    server["grafana_admin_password_file"] = _bad_password_file(tmp_path, kind)
    done = threading.Event()
    found: list = []

    def run():
        found.extend(problems_of(tmp_path, {"mon": server}))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(10), "validation hung on the password file"
    [problem] = found
    assert (problem.host, problem.field) == ("mon", "grafana_admin_password_file")
    assert "the Grafana admin password file" in problem.message and reason in problem.message


@pytest.mark.parametrize("address", ["10.0.0.5", "0.0.0.0", "::", "fd00::5"])
def test_prometheus_off_loopback_is_refused_naming_the_tunnel(tmp_path, address):
    """Prometheus has no authentication without a web config the role does not render:
    on a LAN address it served every scraped series to anyone (issue 46)."""
    server = {**SERVER, **GPU, "ssh_hostname": "10.0.0.5", "monitoring_listen_address": address}
    [problem] = problems_of(tmp_path, {"mon": server})
    assert (problem.host, problem.field) == ("mon", "monitoring_listen_address")
    assert "without authentication" in problem.message and "ssh -L 3000" in problem.message
    assert problem.allowed.startswith("a loopback IP address")


def test_prometheus_on_any_loopback_address_passes(tmp_path):
    server = {**SERVER, **GPU, "ssh_hostname": "10.0.0.5", "monitoring_listen_address": "127.0.0.2"}
    assert problems_of(tmp_path, {"mon": server}) == []
