"""The monitoring plan of a pyinfra inventory: each host's validated config, the address it
is reached at, whether it serves HTTP (a multi-node group's first member does) and its
profile's max_running_requests and enable_metrics. No host contacted.

The configs are given, not read through host_config: inventory validation plans monitoring
too (its refusals are the inventory's problems), and host_config is built on validation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyinfra_sglang.inventory.groups import member_address
from pyinfra_sglang.monitoring.firewall import firewall_errors
from pyinfra_sglang.monitoring.targets import (
    InventoryHost,
    MonitoringPlan,
    MonitoringPlanError,
    monitoring_plan,
    plan_errors,
)
from pyinfra_sglang.serving.host_profile import host_profile

if TYPE_CHECKING:
    from pyinfra.api.inventory import Inventory

    from pyinfra_sglang.config import HostConfig


def inventory_hosts(
    inventory: Inventory, configs: Mapping[str, HostConfig]
) -> tuple[list[InventoryHost], dict[str, bool]]:
    """The hosts of ``inventory`` with their validated ``configs`` (host name -> config)."""
    hosts: list[InventoryHost] = []
    metrics_on: dict[str, bool] = {}
    for host in inventory:
        config = configs[host.name]
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


def monitored(configs: Mapping[str, HostConfig]) -> bool:
    """Does any host of the inventory have monitoring_role = "server"?"""
    return any(config.monitoring_role == "server" for config in configs.values())


def inventory_plan(
    inventory: Inventory, configs: Mapping[str, HostConfig]
) -> MonitoringPlan | None:
    """The plan, or None when no host of the inventory has monitoring_role = "server"."""
    if not monitored(configs):
        return None
    return monitoring_plan(*inventory_hosts(inventory, configs))


def inventory_errors(
    inventory: Inventory, configs: Mapping[str, HostConfig]
) -> list[MonitoringPlanError]:
    """Why the inventory's monitoring cannot work (none without a monitoring server)."""
    if not monitored(configs):
        return []
    hosts, metrics_on = inventory_hosts(inventory, configs)
    return plan_errors(hosts, metrics_on) + firewall_errors(hosts)
