"""The metrics firewall's plan: on each host of a monitored inventory only loopback and the
monitoring server reach the exporters' ports (9100; 9400 with DCGM), never SGLang's API port;
the server's scrape address from the inventory, refused when it cannot be known; the rules
render the same bytes for the same inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.monitoring import render
from pyinfra_sglang.monitoring.firewall import firewall_errors, metrics_firewall_plan
from pyinfra_sglang.monitoring.targets import InventoryHost, MonitoringPlanError

SECRET = Path("secrets/grafana-admin-password")


def _monitor(**extra) -> HostConfig:
    return HostConfig(monitoring_role="server", grafana_admin_password_file=SECRET, **extra)


def _gpu(**extra) -> HostConfig:
    return HostConfig(
        sglang_host="0.0.0.0",
        sglang_metrics_public=True,
        sglang_api_key_file=Path("secrets/sglang-api-key"),
        **extra,
    )


def _hosts(server_address="10.0.0.5", server=None, **gpu) -> list[InventoryHost]:
    return [
        InventoryHost("mon", server_address, server or _monitor()),
        InventoryHost("gpu-1", "10.0.0.11", _gpu(nvidia_dcgm_install=True, **gpu)),
        InventoryHost("gpu-2", "10.0.0.12", _gpu(**gpu)),
    ]


def test_only_the_server_reaches_the_exporter_ports_dcgm_where_it_runs():
    hosts = _hosts()
    with_dcgm = metrics_firewall_plan(hosts, "gpu-1")
    assert with_dcgm is not None
    assert (with_dcgm.scrapers_ipv4, with_dcgm.scrapers_ipv6) == (("10.0.0.5",), ())
    assert with_dcgm.ports == (9100, 9400) and with_dcgm.table == "sglang_metrics"
    assert metrics_firewall_plan(hosts, "gpu-2").ports == (9100,)
    # The server gets a table too: its exporter is reached over loopback (or from itself).
    assert metrics_firewall_plan(hosts, "mon").ports == (9100,)


def test_the_rules_drop_new_connections_to_the_exporters_only_and_render_the_same():
    plan = metrics_firewall_plan(_hosts(), "gpu-1")
    rules = render.metrics_firewall_rules(plan)
    assert rules == render.metrics_firewall_rules(metrics_firewall_plan(_hosts(), "gpu-1"))
    assert "elements = { 10.0.0.5 }" in rules
    assert 'iif "lo" accept' in rules
    assert "tcp dport { 9100, 9400 } ct state new counter drop" in rules
    # SGLang's API port (its /metrics too) stays open to clients.
    assert "30000" not in rules
    assert rules.count("table inet sglang_metrics") == 3  # create, delete, define: atomic


def test_the_unit_loads_the_table_before_the_node_exporter_and_removes_it_on_stop():
    unit = render.metrics_firewall_unit()
    assert "Before=network-pre.target shutdown.target prometheus-node-exporter.service" in unit
    assert "ExecStart=/usr/sbin/nft -f /etc/sglang-firewall/metrics.nft" in unit
    assert "ExecStop=/usr/sbin/nft delete table inet sglang_metrics" in unit


def test_the_scrape_address_the_inventory_gives_wins_ipv6_and_mapped_included():
    server = _monitor(monitoring_scrape_address="fd00::5")
    plan = metrics_firewall_plan(_hosts("mon.example.internal", server), "gpu-2")
    assert (plan.scrapers_ipv4, plan.scrapers_ipv6) == ((), ("fd00::5",))
    assert "elements = { fd00::5 }" in render.metrics_firewall_rules(plan)
    mapped = metrics_firewall_plan(_hosts("::ffff:10.0.0.5"), "gpu-2")
    assert mapped.scrapers_ipv4 == ("10.0.0.5",)


def test_no_server_or_the_firewall_off_gives_no_table():
    no_server = [h for h in _hosts() if h.name != "mon"]
    assert metrics_firewall_plan(no_server, "gpu-1") is None
    assert metrics_firewall_plan(_hosts(monitoring_firewall=False), "gpu-1") is None


def test_a_server_known_by_name_only_is_refused_naming_its_scrape_address():
    [error] = firewall_errors(_hosts("mon.example.internal"))
    assert (error.host, error.field, error.value) == ("mon", "monitoring_scrape_address", "None")
    assert "gpu-1, gpu-2" in error.reason
    with pytest.raises(MonitoringPlanError, match="host mon: monitoring_scrape_address"):
        metrics_firewall_plan(_hosts("mon.example.internal"), "gpu-1")
    # Fine when the others turn their firewall off, or with the address given.
    assert firewall_errors(_hosts("mon.example.internal", monitoring_firewall=False)) == []
    named = _monitor(monitoring_scrape_address="10.0.0.5")
    assert firewall_errors(_hosts("mon.example.internal", named)) == []


def test_a_server_alone_needs_no_scrape_address():
    alone = [InventoryHost("@local", "@local", _monitor())]
    assert firewall_errors(alone) == []
    plan = metrics_firewall_plan(alone, "@local")
    assert plan.scrapers_ipv4 == plan.scrapers_ipv6 == ()


def test_hosts_sharing_one_machines_loopback_are_refused_a_firewall():
    hosts = [
        InventoryHost("a", "127.0.0.11", _monitor(sglang_host="127.0.0.11")),
        InventoryHost("b", "127.0.0.12", HostConfig(sglang_host="127.0.0.12")),
    ]
    errors = firewall_errors(hosts)
    assert [(e.host, e.field) for e in errors] == [
        ("a", "monitoring_firewall"),
        ("b", "monitoring_firewall"),
    ]
    assert "loopback" in errors[0].reason and "false" in errors[0].allowed
    off = [
        InventoryHost(h.name, h.address, h.config.model_copy(update={"monitoring_firewall": False}))
        for h in hosts
    ]
    assert firewall_errors(off) == []
