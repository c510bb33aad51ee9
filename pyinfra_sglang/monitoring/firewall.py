"""The metrics firewall of a monitored inventory: on each host whose monitoring_firewall is on,
only loopback and the monitoring server may open connections to the exporters' ports (the
node exporter's; the DCGM exporter's where nvidia_dcgm_install is on). Pure: the role
(roles/monitoring_firewall.py) renders this plan; validation reports firewall_errors.

SGLang's own /metrics is not here: it is served on the API port, which clients need, and a
packet filter sees ports, not HTTP paths (sglang_metrics_public is the opt-in that opens it)."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from pyinfra_sglang import data
from pyinfra_sglang.monitoring.targets import InventoryHost, MonitoringPlanError, monitoring_servers


@dataclass(frozen=True)
class MetricsFirewallPlan:
    table: str
    server: str  # the monitoring host's inventory name
    scrapers_ipv4: tuple[str, ...]
    scrapers_ipv6: tuple[str, ...]
    ports: tuple[int, ...]  # sorted

    def port_set(self) -> str:
        return ", ".join(str(port) for port in self.ports)


def _plain(text: str) -> IPv4Address | IPv6Address | None:
    """An IP literal as packets carry it (an IPv4-mapped IPv6 address is its IPv4 address);
    None for a name."""
    try:
        parsed = ip_address(text.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(parsed, "ipv4_mapped", None)
    return mapped if mapped is not None else parsed


def scrape_address(server: InventoryHost) -> IPv4Address | IPv6Address | None:
    """Where the monitoring server's scrapes come from: monitoring_scrape_address, else its
    inventory address (ssh_hostname, else its name) when that is an IP address; else None."""
    chosen = server.config.monitoring_scrape_address
    return _plain(str(chosen)) if chosen is not None else _plain(server.address)


def _server(hosts: list[InventoryHost]) -> InventoryHost | None:
    servers = monitoring_servers(hosts)
    if len(servers) != 1:  # none: no monitoring; several: targets.plan_errors says so
        return None
    return next(h for h in hosts if h.name == servers[0])


def firewall_errors(hosts: list[InventoryHost]) -> list[MonitoringPlanError]:
    """Why the metrics firewall cannot tell the monitoring server's scrapes apart, one error
    per host and field: hosts sharing one machine's loopback, or a server whose scrapes come
    from an address the inventory does not give."""
    server = _server(hosts)
    filtered = [h.name for h in hosts if h.config.monitoring_firewall]
    if server is None or not filtered:
        return []
    reached = _plain(server.address)
    if reached is not None and reached.is_loopback:
        # Test hosts (containers) sharing this machine's network: a table would filter the
        # machine's own namespace, and every source is loopback there.
        return [
            MonitoringPlanError(
                name,
                "monitoring_firewall",
                "True",
                f"the monitoring server {server.name} is reached at {reached}, a loopback "
                "address: the hosts share one network namespace, where a firewall cannot tell "
                "the server's scrapes from anyone's",
                "false on hosts that share one machine's network, or a monitoring server "
                "reached at an address of its own",
            )
            for name in filtered
        ]
    others = [name for name in filtered if name != server.name]
    if not others:
        return []  # the server alone: its own scrapes come over loopback
    address = scrape_address(server)
    chosen = server.config.monitoring_scrape_address
    if address is None:
        return [
            MonitoringPlanError(
                server.name,
                "monitoring_scrape_address",
                "None",
                f"unset, and the server's address {server.address!r} is not an IP address: "
                f"the metrics firewall of {', '.join(others)} admits its scrapes by address",
                "the IP address the monitoring server's scrapes come from, or "
                "monitoring_firewall: false on the other hosts",
            )
        ]
    if address.is_loopback:
        return [
            MonitoringPlanError(
                server.name,
                "monitoring_scrape_address",
                str(chosen),
                f"{chosen} is loopback: the server's scrapes of {', '.join(others)} do not "
                "come from it",
                "the IP address the monitoring server's scrapes come from",
            )
        ]
    return []


def metrics_firewall_plan(hosts: list[InventoryHost], name: str) -> MetricsFirewallPlan | None:
    """The plan for host ``name``; None when it gets no table (no monitoring server, or its
    monitoring_firewall off). MonitoringPlanError where validation would have refused."""
    errors = firewall_errors(hosts)
    if errors:
        raise errors[0]
    server = _server(hosts)
    entry = next(h for h in hosts if h.name == name)
    if server is None or not entry.config.monitoring_firewall:
        return None
    conf = data.monitoring()
    ports = {conf.node_exporter.port}
    if entry.config.nvidia_dcgm_install:
        ports.add(conf.dcgm_exporter.port)
    address = scrape_address(server)
    scrapers = [address] if address is not None and not address.is_loopback else []
    return MetricsFirewallPlan(
        table=conf.firewall.table,
        server=server.name,
        scrapers_ipv4=tuple(str(a) for a in scrapers if isinstance(a, IPv4Address)),
        scrapers_ipv6=tuple(str(a) for a in scrapers if isinstance(a, IPv6Address)),
        ports=tuple(sorted(ports)),
    )
