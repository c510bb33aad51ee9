"""Monitoring (inventory monitoring_role): the inventory fields, the scrape targets, the
rendered Prometheus config and alert rules (checked by the real promtool where it is
installed), the dashboards' queries against a real SGLang /metrics capture."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from pyinfra_sglang import data
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.monitoring import render
from pyinfra_sglang.monitoring.dashboards import (
    capture_families,
    dashboard_expressions,
    exposed_family,
    gpu_dashboard,
    gpu_dashboard_json,
    metric_names,
)
from pyinfra_sglang.monitoring.targets import (
    InventoryHost,
    MonitoringPlanError,
    monitoring_plan,
)

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "tests/fixtures/sglang-0.5.17-h200/tiny/metrics-no-key.txt"
SECRET = Path("secrets/grafana-admin-password")


def _monitor(**extra) -> HostConfig:
    return HostConfig(monitoring_role="server", grafana_admin_password_file=SECRET, **extra)


def _gpu(**extra) -> HostConfig:
    fields = {
        "sglang_host": "0.0.0.0",
        "sglang_metrics_public": True,
        "sglang_api_key_file": Path("secrets/sglang-api-key"),
    }
    return HostConfig(**{**fields, **extra})


def _hosts() -> list[InventoryHost]:
    return [
        InventoryHost("mon", "10.0.0.5", _monitor()),
        InventoryHost(
            "gpu-1", "10.0.0.11", _gpu(nvidia_dcgm_install=True), max_running_requests=64
        ),
        InventoryHost("gpu-2", "10.0.0.12", _gpu(), max_running_requests=128),
    ]


# --- the inventory fields ----------------------------------------------------------------


def test_monitoring_is_off_by_default():
    config = HostConfig()
    assert config.monitoring_role == "off"
    assert str(config.monitoring_listen_address) == "127.0.0.1"
    assert config.grafana_admin_password_file is None


def test_a_monitoring_server_with_grafana_needs_a_password_file():
    with pytest.raises(ValidationError, match="grafana_admin_password_file|admin/admin"):
        HostConfig(monitoring_role="server")
    assert (
        HostConfig(monitoring_role="server", monitoring_grafana=False).monitoring_grafana is False
    )


def test_an_unknown_role_names_what_is_allowed():
    with pytest.raises(ValidationError, match="'off' or 'server'"):
        HostConfig(monitoring_role="prometheus")


# --- the targets ---------------------------------------------------------------------------


def test_every_server_exporter_and_dcgm_host_is_a_target_in_inventory_order():
    plan = monitoring_plan(_hosts(), {})
    jobs = {job: [(t.host, t.address) for t in ts] for job, ts in plan.by_job().items()}
    assert jobs["sglang"] == [
        ("mon", "127.0.0.1:30000"),
        ("gpu-1", "10.0.0.11:30000"),
        ("gpu-2", "10.0.0.12:30000"),
    ]
    assert jobs["node"] == [
        ("mon", "127.0.0.1:9100"),
        ("gpu-1", "10.0.0.11:9100"),
        ("gpu-2", "10.0.0.12:9100"),
    ]
    assert jobs["dcgm"] == [("gpu-1", "10.0.0.11:9400")]
    assert jobs["sglang-router"] == []


def test_a_loopback_server_on_another_host_is_refused_naming_host_and_field():
    hosts = [
        InventoryHost("mon", "10.0.0.5", _monitor()),
        InventoryHost("gpu-1", "10.0.0.11", HostConfig()),
    ]
    with pytest.raises(MonitoringPlanError, match=r"host gpu-1: sglang_host: 127\.0\.0\.1"):
        monitoring_plan(hosts, {})


def test_an_exporter_needs_an_address_the_monitoring_host_reaches():
    hosts = [
        InventoryHost("mon", "10.0.0.5", _monitor()),
        InventoryHost("gpu-1", "gpu-1.example", _gpu()),
    ]
    with pytest.raises(MonitoringPlanError, match="host gpu-1: monitoring_exporter_address"):
        monitoring_plan(hosts, {})
    hosts[1] = InventoryHost("gpu-1", "gpu-1.example", _gpu(monitoring_exporter_address="10.1.0.2"))
    assert "10.1.0.2:9100" in [t.address for t in monitoring_plan(hosts, {}).targets]


def test_one_monitoring_server_exactly():
    with pytest.raises(MonitoringPlanError, match="not 0"):
        monitoring_plan([InventoryHost("gpu-1", "10.0.0.11", _gpu())], {})
    two = [InventoryHost("a", "10.0.0.1", _monitor()), InventoryHost("b", "10.0.0.2", _monitor())]
    with pytest.raises(MonitoringPlanError, match="not 2 \\(a, b\\)"):
        monitoring_plan(two, {})


def test_metrics_off_and_remote_routers_are_left_out_with_a_note():
    routed = _gpu(sglang_router_worker_urls=["http://10.0.0.12:30000"])
    hosts = [
        InventoryHost("mon", "10.0.0.5", _monitor()),
        InventoryHost("gpu-1", "10.0.0.11", routed),
        InventoryHost("gpu-2", "10.0.0.12", _gpu()),
    ]
    plan = monitoring_plan(hosts, {"gpu-2": False})
    assert [t.host for t in plan.by_job()["sglang"]] == ["mon", "gpu-1"]
    assert any("gpu-2" in n and "enable_metrics" in n for n in plan.notes)
    assert any("gpu-1" in n and "router" in n for n in plan.notes)


# --- the rendered files --------------------------------------------------------------------


def test_the_config_is_deterministic_and_names_every_target():
    plan = monitoring_plan(_hosts(), {})
    first = render.prometheus_config(plan, "127.0.0.1")
    assert first == render.prometheus_config(monitoring_plan(_hosts(), {}), "127.0.0.1")
    for address in ("127.0.0.1:9090", "10.0.0.11:30000", "10.0.0.12:9100", "10.0.0.11:9400"):
        assert f'["{address}"]' in first
    assert '- "sglang-alerts.yml"' in first
    assert 'max_running_requests: "64"' in first


def test_the_admission_alert_is_rendered_once_per_cap():
    rules = render.alert_rules(monitoring_plan(_hosts(), {}))
    capped = [r.expr for r in rules if r.name == "SglangAdmissionCapped"]
    assert capped == [
        'sglang:num_queue_reqs{job="sglang",max_running_requests="64"} > 0 and on(instance) '
        'sglang:num_running_reqs{job="sglang",max_running_requests="64"} >= 64',
        'sglang:num_queue_reqs{job="sglang",max_running_requests="128"} > 0 and on(instance) '
        'sglang:num_running_reqs{job="sglang",max_running_requests="128"} >= 128',
    ]
    names = [r.name for r in rules]
    assert names[0] == "SglangServerDown" and "GpuXidError" in names


def test_the_alert_rules_read_metrics_the_pinned_release_exposes():
    families = capture_families(CAPTURE.read_text())
    for rule in render.alert_rules(monitoring_plan(_hosts(), {})):
        for name in metric_names(rule.expr, "sglang:"):
            assert exposed_family(name, families), (rule.name, name)


def test_the_dcgm_alerts_read_counters_of_the_exporters_csv():
    dcgm = data.monitoring().dcgm_exporter
    known = set(dcgm.default_counters) | set(dcgm.optional_counters)
    for rule in render.alert_rules(monitoring_plan(_hosts(), {})):
        assert metric_names(rule.expr, "DCGM_") <= known, rule.name


def test_listen_addresses_go_into_the_defaults_files():
    assert render.prometheus_defaults("127.0.0.1").endswith(
        'ARGS="--web.listen-address=127.0.0.1:9090"\n'
    )
    assert 'ARGS="--web.listen-address=[fd00::5]:9100"' in render.node_exporter_defaults(
        "fd00::5", "mon"
    )


def test_the_dcgm_exporter_listens_beside_the_node_exporter_and_nowhere_else():
    hosts = _hosts()
    hosts[1] = InventoryHost(
        "gpu-1",
        "10.0.0.11",
        _gpu(nvidia_dcgm_install=True, monitoring_exporter_address="fd00::11"),
    )
    hosts[0] = InventoryHost("mon", "10.0.0.5", _monitor(nvidia_dcgm_install=True))
    plan = monitoring_plan(hosts, {})
    assert [(t.host, t.address) for t in plan.by_job()["dcgm"]] == [
        ("mon", "127.0.0.1:9400"),
        ("gpu-1", "[fd00::11]:9400"),
    ]
    target = plan.target("dcgm", "gpu-1")
    assert target is not None and plan.target("dcgm", "gpu-2") is None
    dropin = render.dcgm_exporter_dropin(target.address, plan.server)
    assert dropin == render.dcgm_exporter_dropin(target.address, plan.server)
    service = [line for line in dropin.splitlines() if not line.startswith("#")]
    # An empty ExecStart= first: systemd refuses a second ExecStart for a simple service.
    assert service == [
        "[Service]",
        "ExecStart=",
        "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv "
        "-a [fd00::11]:9400",
    ]


def test_grafanas_password_comes_from_a_file_never_from_the_unit_text():
    dropin = render.grafana_dropin("127.0.0.1")
    assert (
        "GF_SECURITY_ADMIN_PASSWORD=$__file{/etc/grafana/pyinfra-sglang-admin-password}" in dropin
    )
    assert "GF_SERVER_HTTP_ADDR=127.0.0.1" in dropin
    datasource = render.grafana_datasource("0.0.0.0")
    assert '"http://127.0.0.1:9090"' in datasource and '"ddyfngn31dg5cf"' in datasource


# --- promtool, where installed (scripts/bootstrap-tests.sh installs it for CI) --------------------


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_config_and_the_rules(tmp_path):
    plan = monitoring_plan(_hosts(), {})
    (tmp_path / "prometheus.yml").write_text(render.prometheus_config(plan, "127.0.0.1"))
    (tmp_path / "sglang-alerts.yml").write_text(render.alert_rules_file(plan))
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "sglang-alerts.yml"]):
        done = subprocess.run(["promtool", *args], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


# --- the dashboards ------------------------------------------------------------------------


def test_the_gpu_dashboard_is_valid_json_of_known_counters():
    dashboard = json.loads(gpu_dashboard_json())
    assert dashboard == gpu_dashboard() and dashboard["uid"] == "pyinfra-sglang-gpus"
    known = set(data.monitoring().dcgm_exporter.default_counters)
    for expr in dashboard_expressions(dashboard):
        assert metric_names(expr, "DCGM_") <= known, expr


def test_metric_names_skip_label_values_and_functions():
    expr = 'sum(rate(sglang:x_bucket{model_name=~"sglang:not_a_metric"}[5m])) by (le)'
    assert metric_names(expr, "sglang:") == {"sglang:x_bucket"}
    assert exposed_family("sglang:x_bucket", {"sglang:x"})
    assert not exposed_family("sglang:y", {"sglang:x"})


def test_the_metrics_sglangs_dashboard_reads_are_in_the_releases_capture():
    families = capture_families(CAPTURE.read_text())
    wanted = data.monitoring().grafana.sglang_dashboard_metrics
    assert len(wanted) == 6
    assert [name for name in wanted if not exposed_family(name, families)] == []


def test_hosts_on_one_machines_loopback_reach_each_other():
    # Test hosts (and containers) share one network: the monitoring host is itself reached
    # on loopback, so another host's loopback address is reachable too.
    hosts = [
        InventoryHost("a", "127.0.0.11", _monitor(sglang_host="127.0.0.11")),
        InventoryHost("b", "127.0.0.12", HostConfig(sglang_host="127.0.0.12")),
    ]
    plan = monitoring_plan(hosts, {})
    assert [t.address for t in plan.by_job()["sglang"]] == ["127.0.0.11:30000", "127.0.0.12:30000"]
    assert plan.exporters == {"a": "127.0.0.1", "b": "127.0.0.12"}


def test_the_sglang_job_renames_names_openmetrics_escaped_back():
    # prometheus_client >= 0.23 answers Prometheus 2.x's OpenMetrics request with sglang_*
    # for sglang:* (seen with SGLang 0.5.17 on the H200 machine): only the SGLang job renames.
    text = render.prometheus_config(monitoring_plan(_hosts(), {}), "127.0.0.1")
    jobs = text.split("  - job_name: ")
    sglang = next(job for job in jobs if job.startswith('"sglang"'))
    assert 'regex: "sglang_(.+)"' in sglang and 'replacement: "sglang:$1"' in sglang
    assert sum("metric_relabel_configs" in job for job in jobs) == 1
    # Every family of the release's capture keeps its name through the rename.
    families = capture_families(CAPTURE.read_text())
    assert families and all(name.startswith("sglang:") for name in families)


# --- the real run: Prometheus 2.42 scraping SGLang 0.5.17 on the H200 machine --------------

REAL = REPO / "tests/fixtures/sglang-0.5.17-h200/monitoring"


def _sample_names(text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_the_rename_gives_back_every_name_sglang_escaped_for_openmetrics():
    import re

    openmetrics = (REAL / "metrics-openmetrics.txt").read_text()
    assert "escaping=underscores" in openmetrics.splitlines()[0]
    escaped = _sample_names(openmetrics)
    assert escaped and all(name.startswith("sglang_") for name in escaped)
    (rename,) = data.monitoring().prometheus.renames
    back = {
        re.sub(f"^{rename.regex}$", rename.replacement.replace("$1", r"\1"), n) for n in escaped
    }
    plain = _sample_names((REAL / "metrics.txt").read_text())
    # OpenMetrics adds a _created sample per counter and histogram; every plain name is back.
    assert plain <= back and all(name.startswith("sglang:") for name in back)


def test_real_prometheus_saw_the_queue_and_the_admission_alert_pending():
    run = json.loads((REAL / "prometheus.json").read_text())
    health = {t["labels"]["job"]: t["health"] for t in run["targets"]["data"]["activeTargets"]}
    assert health["sglang"] == health["prometheus"] == "up"
    answers = {q["panel"]: q["answer"]["data"]["result"] for q in run["queries"]}
    queue = [float(v) for _, v in answers["Number Queued Requests"][0]["values"]]
    running = [float(v) for _, v in answers["Num Running Requests"][0]["values"]]
    assert max(queue) == 30 and max(running) == 2
    states = {(s["metric"]["alertname"], s["metric"]["alertstate"]) for s in answers["ALERTS"]}
    assert states == {("SglangAdmissionCapped", "pending")}
    # Every panel of SGLang's dashboard got series from the real server.
    panels = [q["panel"] for q in run["queries"] if not q["panel"].startswith(("alert ", "ALERTS"))]
    assert panels and all(answers[panel] for panel in panels)
