"""A multi-node member's group network, judged from what sysfs says (GroupNetwork,
parsers/group_network.py): the interface the group's traffic leaves by, and whether NCCL
has an RDMA port to use between the members. Only what was read is judged: a member whose
interface is not known (no route to the others) gets no finding here; the service role
warns of it."""

from __future__ import annotations

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
    return [
        Finding(
            "ok",
            "multinode-network",
            f"Group traffic: {link}; RDMA ports active: {ports}; {peermem}.",
            evidence=evidence,
        )
    ]
