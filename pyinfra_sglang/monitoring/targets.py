"""The scrape targets of an inventory: every SGLang server's /metrics, each router's where
the monitoring host can reach it, a node exporter on every host, NVIDIA's DCGM exporter where
DCGM is installed. From the validated host configs alone, in the inventory's order."""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TYPE_CHECKING

from pyinfra_sglang import data

if TYPE_CHECKING:
    from pyinfra_sglang.config import HostConfig

# Prometheus job names; the alert rules select on them.
JOB_SGLANG = "sglang"
JOB_ROUTER = "sglang-router"
JOB_NODE = "node"
JOB_DCGM = "dcgm"
JOBS = (JOB_SGLANG, JOB_ROUTER, JOB_NODE, JOB_DCGM)


class MonitoringPlanError(ValueError):
    """An inventory whose monitoring cannot work: the host and field to blame, the value,
    why, and what is allowed (validation turns it into a Problem before any host changes)."""

    def __init__(self, host: str, field: str, value: str, reason: str, allowed: str):
        self.host, self.field, self.value = host, field, value
        self.reason, self.allowed = reason, allowed
        super().__init__(f"host {host}: {field}: {reason}; allowed: {allowed}")


@dataclass(frozen=True)
class InventoryHost:
    """One host as the monitoring plan needs it: its inventory name, the address it is
    reached at (ssh_hostname, else its name), its validated config, and whether it is the
    first member of its multi-node group or in none (the node that serves HTTP)."""

    name: str
    address: str
    config: HostConfig
    serves_http: bool = True
    max_running_requests: int | None = None


@dataclass(frozen=True)
class Target:
    job: str
    address: str  # host:port as Prometheus scrapes it
    host: str  # the inventory name, as the label `host`
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MonitoringPlan:
    server: str  # the monitoring host's inventory name
    targets: tuple[Target, ...]
    notes: tuple[str, ...]  # targets left out, and why
    # Host name -> the address its node exporter listens on.
    exporters: dict[str, str] = field(default_factory=dict)

    def target(self, job: str, host: str) -> Target | None:
        """``host``'s target of ``job``, if the plan scrapes one there."""
        return next((t for t in self.targets if t.job == job and t.host == host), None)

    def by_job(self) -> dict[str, list[Target]]:
        jobs: dict[str, list[Target]] = {job: [] for job in JOBS}
        for target in self.targets:
            jobs[target.job].append(target)
        return jobs


def _hostport(address: str, port: int) -> str:
    try:
        if isinstance(ip_address(address.strip("[]")), IPv6Address):
            return f"[{address.strip('[]')}]:{port}"
    except ValueError:
        pass
    return f"{address}:{port}"


def _ip(text: str) -> IPv4Address | IPv6Address | None:
    try:
        return ip_address(text.strip("[]"))
    except ValueError:
        return None


def monitoring_servers(hosts: list[InventoryHost]) -> list[str]:
    return [h.name for h in hosts if h.config.monitoring_role == "server"]


def _unreachable(address, entry: InventoryHost, server: str, shared_loopback: bool) -> bool:
    """A loopback address of another host than the monitoring one: unreachable, unless the
    monitoring host is itself reached on loopback (hosts sharing one machine's network)."""
    return address.is_loopback and entry.name != server and not shared_loopback


def exporter_address(entry: InventoryHost, server: str, shared_loopback: bool = False) -> str:
    """Where ``entry``'s node exporter and DCGM exporter listen (and are scraped):
    monitoring_exporter_address; unset, loopback on the monitoring host itself, else the
    host's address when that is an IP address. MonitoringPlanError when the monitoring host
    could not reach it."""
    chosen = entry.config.monitoring_exporter_address
    if chosen is None:
        if entry.name == server:
            return "127.0.0.1"
        if _ip(entry.address) is None:
            raise MonitoringPlanError(
                entry.name,
                "monitoring_exporter_address",
                "None",
                f"unset, and the host's address {entry.address!r} is not an IP address for "
                "its node exporter to listen on",
                f"an IP address of this host that the monitoring host {server} reaches",
            )
        return entry.address.strip("[]")
    if _unreachable(chosen, entry, server, shared_loopback):
        raise MonitoringPlanError(
            entry.name,
            "monitoring_exporter_address",
            str(chosen),
            f"{chosen} is loopback, which the monitoring host {server} cannot reach",
            f"an IP address of this host that {server} reaches, or unset (the host's address)",
        )
    return str(chosen)


def _server_address(entry: InventoryHost, server: str, shared_loopback: bool) -> str:
    bind = entry.config.sglang_host
    if bind.is_unspecified:
        return "127.0.0.1" if entry.name == server else entry.address.strip("[]")
    if _unreachable(bind, entry, server, shared_loopback):
        raise MonitoringPlanError(
            entry.name,
            "sglang_host",
            str(bind),
            f"{bind} is loopback, so the monitoring host {server} cannot scrape its /metrics",
            f"an address {server} reaches (with sglang_metrics_public: SGLang serves /metrics "
            "without the API key), or the monitoring server on this host",
        )
    return str(bind)


def monitoring_plan(hosts: list[InventoryHost], metrics_on: dict[str, bool]) -> MonitoringPlan:
    """Every target of the inventory, in its order (by job: SGLang, router, node, DCGM).
    ``metrics_on``: host name -> does its profile serve /metrics (enable_metrics).
    MonitoringPlanError (the first of plan_errors) when the inventory cannot be monitored."""
    plan, errors = _plan(hosts, metrics_on)
    if errors:
        raise errors[0]
    assert plan is not None
    return plan


def plan_errors(
    hosts: list[InventoryHost], metrics_on: dict[str, bool]
) -> list[MonitoringPlanError]:
    """Every reason the inventory cannot be monitored, one per host and field."""
    return _plan(hosts, metrics_on)[1]


def _plan(
    hosts: list[InventoryHost], metrics_on: dict[str, bool]
) -> tuple[MonitoringPlan | None, list[MonitoringPlanError]]:
    servers = monitoring_servers(hosts)
    if len(servers) != 1:
        reason = (
            "one host of the inventory is the monitoring server, "
            f"not {len(servers)} ({', '.join(servers) or 'none'})"
        )
        allowed = '"server" on exactly one host, "off" on the others'
        blamed = servers[1:] or [h.name for h in hosts[:1]] or ["(no host)"]
        value = "server" if servers else "off"
        return None, [
            MonitoringPlanError(h, "monitoring_role", value, reason, allowed) for h in blamed
        ]
    server = servers[0]
    server_ip = _ip(next(h.address for h in hosts if h.name == server))
    shared_loopback = bool(server_ip and server_ip.is_loopback)
    ports = data.monitoring()
    targets: list[Target] = []
    notes: list[str] = []
    errors: list[MonitoringPlanError] = []

    def checked(address_of, entry: InventoryHost) -> str | None:
        try:
            return address_of(entry, server, shared_loopback)
        except MonitoringPlanError as error:
            errors.append(error)
            return None

    for entry in hosts:
        config = entry.config
        if not entry.serves_http:
            continue
        if not metrics_on.get(entry.name, True):
            notes.append(
                f"{entry.name}: its profile has enable_metrics off: no SGLang metrics scraped"
            )
            continue
        labels = {}
        if entry.max_running_requests is not None:
            labels["max_running_requests"] = str(entry.max_running_requests)
        bind = checked(_server_address, entry)
        if bind is not None:
            targets.append(
                Target(JOB_SGLANG, _hostport(bind, config.sglang_port), entry.name, labels)
            )
    for entry in hosts:
        if not entry.config.routed():
            continue
        if entry.name != server:
            notes.append(
                f"{entry.name}: the router's metrics listen on loopback only: scraped only "
                "when the router runs on the monitoring host"
            )
            continue
        bind = str(entry.config.router_metrics_bind())
        targets.append(
            Target(JOB_ROUTER, _hostport(bind, entry.config.sglang_router_metrics_port), entry.name)
        )
    exporters: dict[str, str] = {}
    for entry in hosts:
        exporter = checked(exporter_address, entry)
        if exporter is None:
            continue
        exporters[entry.name] = exporter
        targets.append(Target(JOB_NODE, _hostport(exporter, ports.node_exporter.port), entry.name))
    for entry in hosts:
        # Beside the node exporter: the same address, checked above, where it listens only.
        if entry.config.nvidia_dcgm_install and entry.name in exporters:
            address = _hostport(exporters[entry.name], ports.dcgm_exporter.port)
            targets.append(Target(JOB_DCGM, address, entry.name))
    if errors:
        return None, errors
    return MonitoringPlan(server, tuple(targets), tuple(notes), exporters), []
