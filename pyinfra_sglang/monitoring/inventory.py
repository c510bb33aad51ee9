"""The monitoring plan of a pyinfra inventory: each host's validated config, the address it
is reached at, whether it serves HTTP (a multi-node group's first member does) and its
profile's max_running_requests and enable_metrics. No host contacted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra_sglang.inventory.groups import member_address
from pyinfra_sglang.inventory.loading import host_config
from pyinfra_sglang.inventory.model import host_profile
from pyinfra_sglang.monitoring.targets import InventoryHost, MonitoringPlan, monitoring_plan

if TYPE_CHECKING:
    from pyinfra.api.inventory import Inventory


def inventory_hosts(inventory: Inventory) -> tuple[list[InventoryHost], dict[str, bool]]:
    hosts: list[InventoryHost] = []
    metrics_on: dict[str, bool] = {}
    for host in inventory:
        config = host_config(host)
        serves = True
        if config.sglang_multinode_group:
            members = inventory.get_group(config.sglang_multinode_group)
            serves = bool(members) and members[0].name == host.name
        profile = host_profile(config)
        metrics_on[host.name] = bool(profile.enable_metrics)
        hosts.append(
            InventoryHost(
                name=host.name,
                address=member_address(host),
                config=config,
                serves_http=serves,
                max_running_requests=profile.max_running_requests,
            )
        )
    return hosts, metrics_on


def inventory_plan(inventory: Inventory) -> MonitoringPlan | None:
    """The plan, or None when no host of the inventory has monitoring_role = "server"."""
    hosts, metrics_on = inventory_hosts(inventory)
    if not any(h.config.monitoring_role == "server" for h in hosts):
        return None
    return monitoring_plan(hosts, metrics_on)
