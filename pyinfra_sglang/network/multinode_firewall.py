"""What the multi-node firewall admits: the group's members to its rendezvous, ZMQ and
NCCL ports; nobody else. Pure: the role renders this plan (templates/sglang-firewall.*)."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from pyinfra_sglang import data


@dataclass(frozen=True)
class FirewallPlan:
    table: str
    group: str
    members_ipv4: tuple[str, ...]
    members_ipv6: tuple[str, ...]
    port_ranges: tuple[tuple[int, int], ...]  # merged, sorted, inclusive
    ephemeral_ports: tuple[int, int]

    def port_set(self) -> str:
        """The ranges in nftables' set syntax: ``32768-60999, 61000``."""
        return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.port_ranges)


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    # nftables refuses overlapping intervals in one set: merge them first.
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def filtered_ports(dist_init_port: int) -> tuple[tuple[int, int], ...]:
    """The TCP ports only group members may connect to, merged into ranges."""
    conf = data.multinode_firewall()
    span = conf.dist_init_port_span
    low, high = conf.ephemeral_ports
    return _merged([(dist_init_port, min(dist_init_port + span - 1, 65535)), (low, high)])


def packet_address(address: str) -> IPv4Address | IPv6Address:
    """An IP literal as packets carry it: an IPv4-mapped IPv6 address (``::ffff:10.0.0.2``)
    is that IPv4 address, which the IPv4 set must hold (issue 35 N11)."""
    parsed = ip_address(address.strip("[]"))
    mapped = getattr(parsed, "ipv4_mapped", None)
    return mapped if mapped is not None else parsed


def firewall_plan(group: str, member_addresses: list[str], dist_init_port: int) -> FirewallPlan:
    """The plan for one member of ``group``; ``member_addresses`` are IP literals (the
    inventory refuses names when the firewall is on), IPv6 possibly in brackets."""
    addresses = sorted({packet_address(address) for address in member_addresses}, key=str)
    conf = data.multinode_firewall()
    low, high = conf.ephemeral_ports
    return FirewallPlan(
        table=conf.table,
        group=group,
        members_ipv4=tuple(str(a) for a in addresses if isinstance(a, IPv4Address)),
        members_ipv6=tuple(str(a) for a in addresses if not isinstance(a, IPv4Address)),
        port_ranges=filtered_ports(dist_init_port),
        ephemeral_ports=(low, high),
    )


def port_in_filtered_ranges(port: int, dist_init_port: int) -> bool:
    return any(lo <= port <= hi for lo, hi in filtered_ports(dist_init_port))
