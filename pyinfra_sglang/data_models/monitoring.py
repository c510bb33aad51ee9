"""The model of pyinfra_sglang/data/monitoring.toml."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from pyinfra_sglang.data_models.base import DataModel


class MetricRename(DataModel):
    """A metric_relabel_configs rule of one job: names matching ``regex`` become
    ``replacement``."""

    job: str
    regex: str
    replacement: str


class MonitoringPrometheus(DataModel):
    package: str
    service: str
    config: str
    rules: str
    defaults: str
    promtool: str
    port: int
    scrape_interval_s: int = Field(ge=1)
    evaluation_interval_s: int = Field(ge=1)
    staging: str
    renames: tuple[MetricRename, ...] = ()


class MonitoringNodeExporter(DataModel):
    package: str
    service: str
    defaults: str
    port: int


class MonitoringDcgmExporter(DataModel):
    package: str
    service: str
    unit: str
    binary: str
    counters: str
    dropin: str
    port: int
    default_counters: tuple[str, ...]
    optional_counters: tuple[str, ...]


class MonitoringFirewall(DataModel):
    table: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    rules_path: str
    unit_name: str = Field(pattern=r"^[a-z0-9-]+\.service$")
    unit_path: str


class MonitoringGrafana(DataModel):
    repo_url: str
    suite: str
    components: tuple[str, ...]
    key_url: str
    key_fingerprint: str = Field(pattern=r"^[0-9A-F]{40}$")
    keyring: str
    sources_list: str
    package: str
    service: str
    port: int
    provisioning: str
    dashboards_dir: str
    old_dashboard_paths: tuple[str, ...]
    password_file: str
    password_reset: tuple[str, ...]
    user: str
    dropin: str
    datasource_uid: str
    sglang_dashboard: str
    staging_dir: str
    sglang_dashboard_staging: str
    sglang_dashboard_source: str
    sglang_dashboard_url: str
    sglang_dashboard_metrics: tuple[str, ...] = ()


class MonitoringAlert(DataModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    verdict: str
    expr: str
    per_cap: bool = False
    for_: str = Field(alias="for", pattern=r"^\d+[smh]$")
    severity: Literal["critical", "warning", "info"]
    summary: str
    action: str


class Monitoring(DataModel):
    prometheus: MonitoringPrometheus
    node_exporter: MonitoringNodeExporter
    dcgm_exporter: MonitoringDcgmExporter
    firewall: MonitoringFirewall
    grafana: MonitoringGrafana
    alerts: tuple[MonitoringAlert, ...]

    @model_validator(mode="after")
    def _unique_alerts(self) -> Monitoring:
        names = [alert.name for alert in self.alerts]
        if len(names) != len(set(names)):
            raise ValueError("alerts: every alert needs a name of its own")
        return self
