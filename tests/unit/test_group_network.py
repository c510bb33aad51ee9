"""A multi-node member's group network read from sysfs (GroupNetwork): the fact's command
run for real on this machine, its output replayed (tests/fixtures/net), and the audit's
multinode-network finding on what was read. The RDMA port lines are in the kernel's
documented sysfs format (Documentation/ABI/stable/sysfs-class-infiniband: "4: ACTIVE",
"5: LinkUp", "400 Gb/sec (4X NDR)")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from checks.facts.network import GroupNetwork
from checks.facts.nvidia import NvidiaNicPaths
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
    one_gpu = {"read": True, "paths": {"0": {"mlx5_0": "PIX", "mlx5_1": "SYS"}}}
    [(level, _, message)] = judged({**reading, "nic_paths": one_gpu})
    assert level == "ok"
    assert message == (
        "Group traffic: ens1f0np0 up, 100 Gb/s; RDMA ports active: mlx5_0/1 400 Gb/s "
        "InfiniBand; nvidia_peermem loaded; each GPU has an active RDMA NIC through PCIe "
        "switches only (GPU 0 mlx5_0 PIX)."
    )
    without = parse_group_network([line for line in PORTS if line != "peermem=loaded"])
    assert "nvidia_peermem not loaded" in judged({**without, "nic_paths": one_gpu})[0][2]


TOPO = CAPTURE.parent / "topo-h100x8-8nic.txt"


def eight_nics(active: range) -> dict:
    """The 8x H100 host of the public capture, with mlx5_<i> of ``active`` up."""
    lines = ["iface=ibp0", "speed=400000", "operstate=up", "peermem=loaded"]
    for i in range(8):
        state = "4: ACTIVE" if i in active else "1: DOWN"
        lines.append(f"port=mlx5_{i}/1|{state}|5: LinkUp|400 Gb/sec (4X NDR)|InfiniBand")
    paths = NvidiaNicPaths().process(TOPO.read_text().splitlines())
    return {**parse_group_network(lines), "nic_paths": paths}


def test_the_nic_columns_of_a_real_topo_matrix_are_read_per_gpu():
    paths = NvidiaNicPaths().process(TOPO.read_text().splitlines())
    assert paths["read"] and sorted(paths["paths"], key=int) == [str(i) for i in range(8)]
    assert paths["paths"]["0"]["mlx5_0"] == "PIX" and paths["paths"]["0"]["mlx5_4"] == "SYS"
    assert paths["paths"]["5"] == {
        **{f"mlx5_{i}": "SYS" for i in range(4)},
        "mlx5_4": "NODE",
        "mlx5_5": "PIX",
        "mlx5_6": "NODE",
        "mlx5_7": "NODE",
    }
    # A matrix without NICs is read, with no path; no matrix at all is not read.
    gpus_only = ["\tGPU0\tGPU1\tCPU Affinity", "GPU0\t X \tNV18\t0-47", "GPU1\tNV18\t X \t0-47"]
    assert NvidiaNicPaths().process(gpus_only) == {"read": True, "paths": {}}
    failed = ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    assert NvidiaNicPaths().process(failed) == {"read": False, "paths": {}}


def test_every_gpu_on_a_nic_of_its_own_switch_is_ok():
    [(level, _, message)] = judged(eight_nics(range(8)))
    assert level == "ok", message
    assert "GPU 0 mlx5_0 PIX, GPU 1 mlx5_1 PIX" in message and "GPU 7 mlx5_7 PIX" in message


def test_gpus_whose_nics_are_down_warn_by_their_path_to_the_others():
    # The second socket's NICs down: GPUs 4-7 reach only the first socket's, across it.
    [(level, _, message)] = judged(eight_nics(range(4)))
    assert level == "warn"
    assert "GPU 4, 5, 6, 7 reach no active RDMA NIC through PCIe switches alone" in message
    assert "GPU 4 mlx5_0 SYS" in message and "GPU 0 mlx5_0 PIX" in message


def test_paths_not_read_are_a_warning_never_an_ok():
    reading = eight_nics(range(8))
    for unread in (None, {"read": False, "paths": {}}):
        [(level, _, message)] = judged({**reading, "nic_paths": unread})
        assert level == "warn" and "paths to the NICs were not read" in message
    [(level, _, message)] = judged({**reading, "nic_paths": {"read": True, "paths": {}}})
    assert level == "warn" and "lists none of the active RDMA devices" in message


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
