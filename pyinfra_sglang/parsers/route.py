"""``ip -o route get ADDRESS`` -> the interface the kernel sends to ADDRESS from, and whether
ADDRESS is the host's own (iproute2's one-line form, tests/fixtures/net/ip-route-get.txt):

    10.255.255.1 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache
    local 192.0.2.2 dev lo src 192.0.2.2 uid 0 \\    cache <local>
    2001:db8::1 from :: via fd00::1 dev eth0 src fd00::2 metric 1024 pref medium
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict


class RouteDict(TypedDict):
    interface: str
    source: str | None  # the host's address on that interface
    local: bool  # the address is the host's own: the route goes through lo


def parse_route_get(output: Iterable[str]) -> RouteDict | None:
    """The route of the first line that names a device; None when none does (an error, no
    route, nothing read)."""
    for line in output:
        words = line.split()
        if "dev" not in words[:-1]:
            continue
        interface = words[words.index("dev") + 1]
        source = words[words.index("src") + 1] if "src" in words[:-1] else None
        local = words[0] == "local" or interface == "lo"
        return {"interface": interface, "source": source, "local": local}
    return None
