"""Facts of the host's network: the route the kernel takes to another host."""

from __future__ import annotations

import shlex
from ipaddress import ip_address

from pyinfra.api import FactBase

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
