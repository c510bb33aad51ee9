"""The metrics firewall (inventory monitoring_firewall; docs/monitoring.md): with a monitoring
server in the inventory, every host whose monitoring_firewall is on gets an nftables table of
its own that admits only loopback and the monitoring server to the exporters' ports; a host
without it (no server, or the firewall off) gets the table, its rules and unit removed.
SGLang's /metrics, on the API port clients need, is not filtered."""

from __future__ import annotations

import io

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from pyinfra_sglang import data
from pyinfra_sglang.data_models import MonitoringFirewall
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.inventory.monitoring import inventory_hosts, monitored
from pyinfra_sglang.monitoring import render
from pyinfra_sglang.monitoring.firewall import MetricsFirewallPlan, metrics_firewall_plan
from roles.nft_table import rules_folder, table_loaded, table_removed


def _put(name: str, text: str, dest: str, mode: str):
    return files.put(
        name=name, src=io.StringIO(text), dest=dest, user="root", group="root", mode=mode
    )


def _install(plan: MetricsFirewallPlan, conf: MonitoringFirewall) -> None:
    rules_folder(conf.rules_path)
    rules = _put(
        f"Admit only {plan.server} to the metrics ports {plan.port_set()}",
        render.metrics_firewall_rules(plan),
        conf.rules_path,
        "600",
    )
    unit = _put(
        "Unit that loads the metrics firewall at boot",
        render.metrics_firewall_unit(),
        conf.unit_path,
        "644",
    )
    table_loaded("metrics firewall", conf.unit_name, conf.rules_path, rules, unit)


def _remove(conf: MonitoringFirewall) -> None:
    table_removed(
        "metrics firewall",
        conf.table,
        conf.unit_name,
        conf.unit_path,
        {"Remove the metrics firewall's rules": conf.rules_path},
    )


@deploy("Metrics firewall")
def monitoring_firewall() -> None:
    """Admit only the monitoring server to the metrics ports, with nftables.

    On every host of an inventory with a monitoring server: an nftables table, loaded at boot
    before the node exporter, that drops new connections to the node exporter's port (and the
    DCGM exporter's, with nvidia_dcgm_install) from anywhere but loopback and the server.
    SGLang's /metrics (the API port) is not filtered. No server, or the firewall off: removed.

    + monitoring_firewall: off removes the table
    + monitoring_scrape_address: on the server, the address its scrapes come from
    """
    inventory = host.inventory
    conf = data.monitoring().firewall
    configs = {h.name: host_config(h) for h in inventory}
    plan = None
    if monitored(configs):
        hosts, _ = inventory_hosts(inventory, configs)
        plan = metrics_firewall_plan(hosts, host.name)
    if plan is None:
        _remove(conf)
    else:
        _install(plan, conf)
