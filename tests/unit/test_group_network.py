"""A multi-node member's group network read from sysfs (GroupNetwork): the fact's command
run for real on this machine, its output replayed (tests/fixtures/net), and the audit's
multinode-network finding on what was read. The RDMA port lines are in the kernel's
documented sysfs format (Documentation/ABI/stable/sysfs-class-infiniband: "4: ACTIVE",
"5: LinkUp", "400 Gb/sec (4X NDR)")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from checks.facts.network import GroupNetwork
from pyinfra_sglang.audit.group_network import findings_for_group_network
from pyinfra_sglang.parsers.group_network import parse_group_network

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "net" / "group-network-eth0.txt"


def read(interface: str) -> str:
    command = GroupNetwork().command(interface)
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True).stdout


def judged(reading):
    return [(f.level, f.code, f.message) for f in findings_for_group_network(reading)]


def test_the_command_reads_this_machines_sysfs():
    interface = sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name != "lo")[0]
    reading = GroupNetwork().process(read(interface).splitlines())
    assert reading["interface"] == interface
    operstate = Path(f"/sys/class/net/{interface}/operstate").read_text().strip()
    assert reading["operstate"] == operstate
    assert reading["peermem"] is Path("/sys/module/nvidia_peermem").is_dir()
    assert len(reading["ports"]) == len(list(Path("/sys/class/infiniband").glob("*/ports/*")))


def test_a_hostile_interface_name_stays_text():
    printed = read("e'th; touch /tmp/never-$$").splitlines()
    assert printed[0] == "iface=e'th; touch /tmp/never-$$"
    assert "speed=" in printed and "operstate=" in printed


def test_a_virtual_nic_without_rdma_warns_that_nccl_runs_over_sockets():
    reading = parse_group_network(CAPTURE.read_text().splitlines())
    assert reading == {
        "interface": "eth0",
        "speed_mbps": None,
        "operstate": "up",
        "peermem": False,
        "ports": [],
    }
    [(level, code, message)] = judged(reading)
    assert (level, code) == ("warn", "multinode-network")
    assert message.startswith("Group traffic: eth0 up, speed not reported (a virtual NIC);")
    assert "no RDMA port is active (/sys/class/infiniband: none)" in message
    assert "NCCL runs its socket transport over eth0" in message


PORTS = [
    "iface=ens1f0np0",
    "speed=100000",
    "operstate=up",
    "peermem=loaded",
    "port=mlx5_0/1|4: ACTIVE|5: LinkUp|400 Gb/sec (4X NDR)|InfiniBand",
    "port=mlx5_1/1|1: DOWN|2: Polling|10 Gb/sec (4X SDR)|InfiniBand",
]


def test_active_rdma_ports_are_named_with_their_rate():
    reading = parse_group_network(PORTS)
    assert reading["ports"][0] == {
        "name": "mlx5_0/1",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "link_layer": "InfiniBand",
    }
    [(level, _, message)] = judged(reading)
    assert level == "ok"
    assert message == (
        "Group traffic: ens1f0np0 up, 100 Gb/s; RDMA ports active: mlx5_0/1 400 Gb/s "
        "InfiniBand; nvidia_peermem loaded."
    )
    without = parse_group_network([line for line in PORTS if line != "peermem=loaded"])
    assert "nvidia_peermem not loaded" in judged(without)[0][2]


def test_ports_that_are_all_down_warn_naming_them():
    down = parse_group_network([*PORTS[:4], PORTS[5]])
    [(level, _, message)] = judged(down)
    assert level == "warn" and "(/sys/class/infiniband: mlx5_1/1 DOWN)" in message


def test_an_interface_that_is_down_fails_and_nothing_read_judges_nothing():
    down = parse_group_network(["iface=eth1", "speed=-1", "operstate=down", "peermem=absent"])
    [(level, _, message)] = judged(down)
    assert level == "fail" and message.startswith("The group's interface eth1 is down")
    missing = parse_group_network(["iface=eth9", "speed=", "operstate=", "peermem=absent"])
    assert judged(missing)[0][0] == "fail" and "is not there" in judged(missing)[0][2]
    assert judged(None) == [] and parse_group_network([]) is None
