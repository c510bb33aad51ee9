"""A multi-node member's bootstrap interface: ``ip -o route get`` read on real output
(tests/fixtures/net), the fact's command run for real on this machine, and the interface in
the server's env file as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (sglang_env wins)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from checks.facts import RouteTo
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.parsers.route import parse_route_get
from pyinfra_sglang.serving.placement import NodePosition
from pyinfra_sglang.serving.render import Secrets
from pyinfra_sglang.serving.service_files import (
    multinode_interface_env,
    planned_placement,
    service_files_for,
)

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "net" / "ip-route-get.txt"


def blocks() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in CAPTURE.read_text().splitlines():
        if line.startswith("### ip -o route get "):
            current = found.setdefault(line.removeprefix("### ip -o route get "), [])
        else:
            current.append(line)
    return found


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.255.255.1", {"interface": "eth0", "source": "192.0.2.2", "local": False}),
        ("192.0.2.1", {"interface": "eth0", "source": "192.0.2.2", "local": False}),
        ("127.0.0.1", {"interface": "lo", "source": "127.0.0.1", "local": True}),
        ("192.0.2.2", {"interface": "lo", "source": "192.0.2.2", "local": True}),
        ("::1", {"interface": "lo", "source": "::1", "local": True}),
        ("2001:db8::1", {"interface": "eth0", "source": "fd00::2", "local": False}),
        ("203.0.113.300", None),
    ],
)
def test_routes_read_from_real_output(address, expected):
    assert parse_route_get(blocks()[address]) == expected


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost"])
def test_the_fact_command_runs_as_written_for_an_address_and_a_name(address):
    command = RouteTo().command(address)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0
    route = RouteTo().process(done.stdout.splitlines())
    assert route is not None and route["local"] and route["interface"] == "lo"


def test_a_hostile_name_stays_one_word():
    command = RouteTo().command("gpu-01; touch /tmp/owned")
    assert "'gpu-01; touch /tmp/owned'" in command


def grouped(**values) -> HostConfig:
    return HostConfig(sglang_multinode_group="pair", sglang_model_profile="dense-bf16", **values)


def env_lines(config: HostConfig, found: str | None = None) -> list[str]:
    placement = planned_placement(config, NodePosition(2, 1, "10.0.0.11:50000"))
    files = service_files_for(config, placement, Secrets(), interface=found)
    [env] = [f for f in files.files if f.path.endswith("sglang.env")]
    return env.content.splitlines()


def test_the_routed_interface_goes_into_the_env_file():
    lines = env_lines(grouped(), found="ens5")
    assert "GLOO_SOCKET_IFNAME=ens5" in lines and "NCCL_SOCKET_IFNAME==ens5" in lines


def test_the_inventory_names_it_and_sglang_env_wins():
    assert "GLOO_SOCKET_IFNAME=bond0" in env_lines(
        grouped(sglang_multinode_interface="bond0"), found="ens5"
    )
    lines = env_lines(grouped(sglang_env={"NCCL_SOCKET_IFNAME": "ib"}), found="ens5")
    assert "NCCL_SOCKET_IFNAME=ib" in lines and "GLOO_SOCKET_IFNAME=ens5" in lines


def test_nothing_outside_a_group_or_without_an_interface():
    assert multinode_interface_env(HostConfig(), "ens5") == {}
    assert multinode_interface_env(grouped(), None) == {}
    assert not [line for line in env_lines(grouped()) if "SOCKET_IFNAME" in line]


def test_a_bad_interface_name_is_refused():
    with pytest.raises(ValueError, match="sglang_multinode_interface"):
        grouped(sglang_multinode_interface="eth0 --api-key x")
