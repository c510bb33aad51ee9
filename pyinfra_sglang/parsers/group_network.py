"""What a multi-node member's group network is ready for, read from sysfs (GroupNetwork's
output): the interface the group's traffic leaves by (its speed in Mb/s and operstate,
Documentation/ABI/testing/sysfs-class-net), the RDMA ports (state, phys_state, rate,
link_layer under /sys/class/infiniband/<device>/ports/<n>/, the kernel's
Documentation/ABI/stable/sysfs-class-infiniband: "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X
NDR)"), and whether nvidia_peermem (GPUDirect RDMA) is loaded.

    iface=eth1
    speed=10000
    operstate=up
    peermem=absent
    port=mlx5_0/1|4: ACTIVE|5: LinkUp|400 Gb/sec (4X NDR)|InfiniBand
"""

from __future__ import annotations

import re
from collections.abc import Iterable

RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")


def _state(text: str) -> str:
    """ "4: ACTIVE" -> "ACTIVE"; the text as it is when it has no number."""
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def parse_group_network(output: Iterable[str]) -> dict | None:
    """{"interface", "speed_mbps" (None: not reported, as for a virtual NIC), "operstate",
    "peermem", "ports": [{"name", "state", "phys_state", "rate_gbps", "link_layer"}]};
    None when nothing was read."""
    reading: dict = {"interface": None, "speed_mbps": None, "operstate": None}
    reading.update({"peermem": None, "ports": []})
    for line in output:
        key, _, value = line.strip().partition("=")
        if key == "iface":
            reading["interface"] = value
        elif key == "speed":
            # -1 (a virtual NIC, a link down) or unreadable: not reported.
            speed = int(value) if value.lstrip("-").isdigit() else -1
            reading["speed_mbps"] = speed if speed > 0 else None
        elif key == "operstate":
            reading["operstate"] = value or None
        elif key == "peermem":
            reading["peermem"] = value == "loaded"
        elif key == "port":
            fields = (value.split("|") + [""] * 5)[:5]
            rate = RATE.match(fields[3])
            reading["ports"].append(
                {
                    "name": fields[0],
                    "state": _state(fields[1]),
                    "phys_state": _state(fields[2]),
                    "rate_gbps": float(rate[1]) if rate else None,
                    "link_layer": fields[4] or None,
                }
            )
    return reading if reading["interface"] else None
