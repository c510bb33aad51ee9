"""A multi-node member's group network, judged from what sysfs says (GroupNetwork,
parsers/group_network.py): the interface the group's traffic leaves by, and whether NCCL
has an RDMA port to use between the members. Only what was read is judged: a member whose
interface is not known (no route to the others) gets no finding here; the service role
warns of it."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding

# operstate values of a usable interface (sysfs-class-net: "unknown" for a few virtual
# devices that do not track it).
USABLE = ("up", "unknown")


def _speed(reading: dict) -> str:
    speed = reading["speed_mbps"]
    return f"{speed / 1000:g} Gb/s" if speed else "speed not reported (a virtual NIC)"


def findings_for_group_network(reading: dict | None) -> list[Finding]:
    if reading is None:
        return []
    interface = reading["interface"]
    evidence = dict(reading)
    if reading["operstate"] not in USABLE:
        return [
            Finding(
                "fail",
                "multinode-network",
                f"The group's interface {interface} is {reading['operstate'] or 'not there'}: "
                "the members cannot rendezvous over it (GLOO_SOCKET_IFNAME and "
                "NCCL_SOCKET_IFNAME name it). Bring it up, or set sglang_multinode_interface.",
                evidence=evidence,
            )
        ]
    active = [p for p in reading["ports"] if p["state"] == "ACTIVE"]
    link = f"{interface} up, {_speed(reading)}"
    if not active:
        seen = ", ".join(f"{p['name']} {p['state'] or '?'}" for p in reading["ports"]) or "none"
        return [
            Finding(
                "warn",
                "multinode-network",
                f"Group traffic: {link}; no RDMA port is active (/sys/class/infiniband: "
                f"{seen}), so NCCL runs its socket transport over {interface}. Tensor "
                "parallelism across nodes wants InfiniBand or RoCE ports up on every member.",
                evidence=evidence,
            )
        ]
    ports = ", ".join(
        f"{p['name']} {p['rate_gbps']:g} Gb/s {p['link_layer'] or ''}".rstrip()
        if p["rate_gbps"]
        else p["name"]
        for p in active
    )
    peermem = (
        "nvidia_peermem loaded"
        if reading["peermem"]
        else "nvidia_peermem not loaded (GPUDirect RDMA needs it, or DMA-BUF with the open "
        "kernel modules)"
    )
    level, paths = _gpu_paths(reading.get("nic_paths"), {p["name"].split("/")[0] for p in active})
    return [
        Finding(
            level,
            "multinode-network",
            f"Group traffic: {link}; RDMA ports active: {ports}; {peermem}; {paths}.",
            evidence=evidence,
        )
    ]


def _gpu_indexes(gpus: list[str]) -> str:
    return ", ".join(sorted(gpus, key=int))


def _gpu_paths(reading: dict | None, active: set[str]) -> tuple[str, str]:
    """(level, words) of each GPU's path to its nearest active RDMA NIC (`topo -m`): ok when
    every GPU has one through PCIe switches only, warn naming the GPUs that do not, and warn
    when the paths could not be read (never an ok about them)."""
    if reading is None or not reading.get("read"):
        return "warn", "the GPUs' paths to the NICs were not read (nvidia-smi topo -m)"
    topo = data.nvidia_smi().topo
    order = {path: rank for rank, path in enumerate(topo.nic_paths)}
    nearest: dict[str, tuple[str, str]] = {}
    for gpu, nics in reading["paths"].items():
        candidates = [
            (order.get(p, len(order)), p, nic) for nic, p in nics.items() if nic in active
        ]
        if candidates:
            _, path, nic = min(candidates)
            nearest[gpu] = (nic, path)
    if not nearest:
        return "warn", "nvidia-smi topo -m lists none of the active RDMA devices against a GPU"
    far = [gpu for gpu, (_, path) in nearest.items() if path not in topo.gpudirect_paths]
    shown = ", ".join(
        f"GPU {gpu} {nic} {path}"
        for gpu, (nic, path) in sorted(nearest.items(), key=lambda item: int(item[0]))
    )
    if not far:
        return "ok", f"each GPU has an active RDMA NIC through PCIe switches only ({shown})"
    return "warn", (
        f"GPU {_gpu_indexes(far)} reach no active RDMA NIC through PCIe switches alone "
        f"({shown}): GPUDirect RDMA wants the NIC and the GPU under one PCIe root complex, "
        "and NCCL may send those GPUs' traffic through host memory"
    )
