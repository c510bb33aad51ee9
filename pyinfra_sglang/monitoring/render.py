"""The files of the monitoring host, rendered from the plan (targets.py) and
data/monitoring.toml: prometheus.yml, the alert rules, the listen addresses in the services'
defaults files, Grafana's provisioning. Deterministic: the same inventory renders the same
bytes (targets in the inventory's order, labels sorted)."""

from __future__ import annotations

from ipaddress import ip_address

from pyinfra_sglang import data
from pyinfra_sglang.data_models import MonitoringAlert
from pyinfra_sglang.monitoring.firewall import MetricsFirewallPlan
from pyinfra_sglang.monitoring.targets import JOB_DCGM, JOB_SGLANG, MonitoringPlan
from pyinfra_sglang.templating import render_template


def listen(address: str, port: int) -> str:
    """host:port for a --web.listen-address (an IPv6 address in brackets)."""
    bare = address.strip("[]")
    return f"[{bare}]:{port}" if ip_address(bare).version == 6 else f"{bare}:{port}"


def prometheus_config(plan: MonitoringPlan, listen_address: str) -> str:
    """prometheus.yml: Prometheus itself, then each job with targets, in the plan's order."""
    settings = data.monitoring().prometheus
    own = {"name": "prometheus", "targets": [_self_target(plan, listen_address)], "renames": []}
    renames: dict[str, list] = {}
    for rename in settings.renames:
        renames.setdefault(rename.job, []).append(rename)
    jobs = [own] + [
        {"name": job, "targets": targets, "renames": renames.get(job, [])}
        for job, targets in plan.by_job().items()
        if targets
    ]
    return render_template(
        "prometheus.yml.j2",
        scrape_interval_s=settings.scrape_interval_s,
        evaluation_interval_s=settings.evaluation_interval_s,
        rules_file=settings.rules.rsplit("/", 1)[-1],
        jobs=jobs,
    )


def _self_target(plan: MonitoringPlan, listen_address: str):
    from pyinfra_sglang.monitoring.targets import Target

    address = listen(listen_address, data.monitoring().prometheus.port)
    if ip_address(listen_address).is_unspecified:
        address = listen("127.0.0.1", data.monitoring().prometheus.port)
    return Target("prometheus", address, plan.server)


def _caps(plan: MonitoringPlan) -> list[str]:
    caps = {
        t.labels["max_running_requests"]
        for t in plan.by_job()[JOB_SGLANG]
        if "max_running_requests" in t.labels
    }
    return sorted(caps, key=int)


def alert_rules(plan: MonitoringPlan) -> list[MonitoringAlert]:
    """data/monitoring.toml's alerts with their expressions filled in: the admission-capped
    one once per max_running_requests the servers have (none when no server sets one)."""
    rules: list[MonitoringAlert] = []
    for alert in data.monitoring().alerts:
        fill = {"job_sglang": JOB_SGLANG, "job_dcgm": JOB_DCGM}
        if not alert.per_cap:
            rules.append(alert.model_copy(update={"expr": alert.expr.format(**fill)}))
            continue
        for cap in _caps(plan):
            selector = f'{{job="{JOB_SGLANG}",max_running_requests="{cap}"}}'
            expr = alert.expr.format(selector=selector, cap=cap, **fill)
            rules.append(alert.model_copy(update={"expr": expr}))
    return rules


def alert_rules_file(plan: MonitoringPlan) -> str:
    return render_template("prometheus-alerts.yml.j2", rules=alert_rules(plan))


def prometheus_defaults(listen_address: str) -> str:
    return render_template(
        "prometheus.default.j2",
        listen=listen(listen_address, data.monitoring().prometheus.port),
    )


def node_exporter_defaults(address: str, server: str) -> str:
    return render_template(
        "prometheus-node-exporter.default.j2",
        listen=listen(address, data.monitoring().node_exporter.port),
        server=server,
    )


def dcgm_exporter_dropin(listen_address: str, server: str) -> str:
    """The DCGM exporter's systemd drop-in: its unit's ExecStart, replaced by one listening
    on ``listen_address`` (host:port, as the plan's DCGM target scrapes it)."""
    settings = data.monitoring().dcgm_exporter
    return render_template(
        "nvidia-dcgm-exporter.dropin.conf.j2",
        binary=settings.binary,
        counters=settings.counters,
        listen=listen_address,
        server=server,
    )


def grafana_datasource(listen_address: str) -> str:
    settings = data.monitoring()
    bare = "127.0.0.1" if ip_address(listen_address).is_unspecified else listen_address
    return render_template(
        "grafana-datasource.yml.j2",
        uid=settings.grafana.datasource_uid,
        url=f"http://{listen(bare, settings.prometheus.port)}",
    )


def grafana_dashboards_provider() -> str:
    return render_template(
        "grafana-dashboards.yml.j2", path=data.monitoring().grafana.dashboards_dir
    )


def grafana_dropin(listen_address: str) -> str:
    grafana = data.monitoring().grafana
    return render_template(
        "grafana-server.dropin.conf.j2",
        listen=listen_address,
        port=grafana.port,
        password_file=grafana.password_file,
    )


def metrics_firewall_rules(plan: MetricsFirewallPlan) -> str:
    """The metrics firewall's nftables file: the same plan renders the same bytes."""
    return render_template("sglang-metrics-firewall.nft.j2", plan=plan)


def metrics_firewall_unit() -> str:
    settings = data.monitoring()
    return render_template(
        "sglang-metrics-firewall.service.j2",
        exporter_unit=f"{settings.node_exporter.service}.service",
        rules_path=settings.firewall.rules_path,
        table=settings.firewall.table,
    )
