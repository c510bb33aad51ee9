"""Rolling restarts: the router each server stands behind, found from every host's validated
config (its worker URLs), so that a deploy restarts one router's servers a batch at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from pyinfra_sglang.inventory.groups import member_address
from pyinfra_sglang.inventory.loading import host_config

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory

    from pyinfra_sglang.config import HostConfig


def _url_names(host: Host, config: HostConfig) -> set[str]:
    """The names a router's worker URL may give this host by."""
    names = {host.name, member_address(host), str(config.sglang_host)}
    return {name.strip("[]").lower() for name in names}


def rolling_group(host: Host) -> str | None:
    """The router this host's server stands behind (its worker URLs name the host and its
    port), as "router <name>": a deploy restarts that router's servers a batch at a time.
    None behind no router, or in a multi-node group (its members restart together)."""
    found = router_of(host)
    return f"router {found[0]}" if found else None


def router_of(host: Host) -> tuple[str, str] | None:
    """(the router host's name, the worker URL it lists this host's server by): the first
    router in the inventory's order that lists it, by any of its names. None behind no
    router, or in a multi-node group."""
    config = host_config(host)
    if config.sglang_multinode_group:
        return None
    routers = _routers_by_worker(host.inventory)
    keys = [(name, config.sglang_port) for name in _url_names(host, config)]
    listed = [routers[key] for key in keys if key in routers]
    if not listed:
        return None
    _, name, url = min(listed)
    return name, url


# Inventory -> its routers by worker; weak, so an inventory gone leaves no stale entry.
_routers: WeakKeyDictionary = WeakKeyDictionary()


def _routers_by_worker(
    inventory: Inventory,
) -> dict[tuple[str, int | None], tuple[int, str, str]]:
    """(worker host, port) -> (position, name, worker URL) of the first router listing it;
    built once per inventory (every host asks, several times a run)."""
    if inventory not in _routers:
        found: dict[tuple[str, int | None], tuple[int, str]] = {}
        for position, router in enumerate(inventory):
            for url in host_config(router).sglang_router_worker_urls:
                name = (url.host or "").strip("[]").lower()
                found.setdefault((name, url.port), (position, router.name, str(url)))
        _routers[inventory] = found
    return _routers[inventory]
