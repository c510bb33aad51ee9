"""Grafana dashboards: the PromQL of a dashboard's panels and the metric names it reads
(checked against a real /metrics capture in the tests), and the GPU dashboard of the DCGM
exporter's default counters (data/monitoring.toml [dcgm_exporter]), built here."""

from __future__ import annotations

import json
import re
from typing import Any

from pyinfra_sglang import data

# A metric name in PromQL: letters, digits, '_' and ':' (Prometheus's data model).
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every panel target's ``expr``, nested rows included, in the dashboard's order."""
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append(target["expr"])
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    return found


def metric_names(expr: str, prefix: str) -> set[str]:
    """The metric names starting with ``prefix`` that ``expr`` reads (label values, the
    quoted strings, are left out)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return {name for name in _METRIC.findall(unquoted) if name.startswith(prefix)}


def exposed_family(name: str, families: set[str]) -> bool:
    """Is ``name`` a family in ``families`` (a # TYPE line's name), or one of a histogram's
    series (_bucket, _sum, _count)?"""
    if name in families:
        return True
    return any(name.endswith(s) and name[: -len(s)] in families for s in _HISTOGRAM_SUFFIXES)


def capture_families(text: str) -> set[str]:
    """The metric names a /metrics capture shows: its # TYPE lines' families and the names
    of its samples (a capture of polls may carry no # TYPE line)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE ") and len(line.split()) >= 4:
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            match = _METRIC.match(line)
            if match:
                names.add(match.group(0))
    return names


_GPU_PANELS = (
    ("GPU utilization (%)", "DCGM_FI_DEV_GPU_UTIL", "percent"),
    ("Memory copy utilization (%)", "DCGM_FI_DEV_MEM_COPY_UTIL", "percent"),
    ("Framebuffer used (MiB)", "DCGM_FI_DEV_FB_USED", "mbytes"),
    ("Power draw (W)", "DCGM_FI_DEV_POWER_USAGE", "watt"),
    ("GPU temperature (C)", "DCGM_FI_DEV_GPU_TEMP", "celsius"),
    ("SM clock (MHz)", "DCGM_FI_DEV_SM_CLOCK", "none"),
    ("Last Xid", "DCGM_FI_DEV_XID_ERRORS", "none"),
    ("PCIe replays (per second)", "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m])", "none"),
)


def gpu_dashboard() -> dict[str, Any]:
    """A dashboard of the DCGM exporter's default counters, one panel each, a series per
    host and GPU."""
    uid = data.monitoring().grafana.datasource_uid
    panels = []
    for index, (title, query, unit) in enumerate(_GPU_PANELS):
        expr = query if "(" in query else f'{query}{{job="dcgm"}}'
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": uid},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": "A",
                        "expr": expr,
                        "legendFormat": "{{host}} GPU {{gpu}}",
                        "datasource": {"type": "prometheus", "uid": uid},
                    }
                ],
            }
        )
    return {
        "uid": "pyinfra-sglang-gpus",
        "title": "GPUs (DCGM exporter)",
        "tags": ["pyinfra-sglang", "gpu"],
        "schemaVersion": 41,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "panels": panels,
    }


def gpu_dashboard_json() -> str:
    return json.dumps(gpu_dashboard(), indent=2, sort_keys=True) + "\n"
