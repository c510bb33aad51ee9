"""Facts of the host's network: the route the kernel takes to another host."""

from __future__ import annotations

import shlex
from ipaddress import ip_address

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.group_network import parse_group_network
from pyinfra_sglang.parsers.route import RouteDict, parse_route_get


class RouteTo(FactBase[RouteDict | None]):
    """The interface the host sends to ``address`` from (``ip -o route get``; a name is
    resolved on the host first, with getent), its source address, and whether the address
    is the host's own; None without a route (see parse_route_get)."""

    def command(self, address: str) -> str:
        try:
            literal = str(ip_address(address))
        except ValueError:
            literal = None
        if literal is not None:
            return f"ip -o route get {shlex.quote(literal)} 2>/dev/null || true"
        name = shlex.quote(address)
        return (
            f"a=$(getent ahosts {name} | awk 'NR==1{{print $1}}'); "
            '[ -n "$a" ] && ip -o route get "$a" 2>/dev/null || true'
        )

    def process(self, output: list[str]) -> RouteDict | None:
        return parse_route_get(output)


class GroupNetwork(FactBase[dict | None]):
    """A multi-node member's group network from sysfs: ``interface``'s speed and operstate,
    the RDMA ports' state and rate, nvidia_peermem (see parse_group_network)."""

    def command(self, interface: str) -> str:
        net = f"/sys/class/net/{interface}"
        return (
            f"printf 'iface=%s\\n' {shlex.quote(interface)}; "
            f"printf 'speed=%s\\n' \"$(cat {shlex.quote(net + '/speed')} 2>/dev/null)\"; "
            f"printf 'operstate=%s\\n' \"$(cat {shlex.quote(net + '/operstate')} 2>/dev/null)\"; "
            "if [ -d /sys/module/nvidia_peermem ]; then echo peermem=loaded; "
            "else echo peermem=absent; fi; "
            'for p in /sys/class/infiniband/*/ports/*; do [ -d "$p" ] || continue; '
            "d=${p#/sys/class/infiniband/}; "
            "printf 'port=%s|%s|%s|%s|%s\\n' \"${d%%/ports/*}/${p##*/}\" "
            '"$(cat "$p/state" 2>/dev/null)" "$(cat "$p/phys_state" 2>/dev/null)" '
            '"$(cat "$p/rate" 2>/dev/null)" "$(cat "$p/link_layer" 2>/dev/null)"; '
            "done; true"
        )

    def process(self, output: list[str]) -> dict | None:
        return parse_group_network(output)
