"""Grafana dashboards: the PromQL of a dashboard's panels and the metric names it reads
(checked against a real /metrics capture in the tests), the check SGLang's downloaded
dashboard passes before Grafana gets it, and the GPU dashboard of the DCGM exporter's default
counters (data/monitoring.toml [dcgm_exporter]), built here."""

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

    def walk(panels: Any) -> None:
        # A downloaded file is checked with this too: anything not a list of objects is skipped.
        for panel in panels if isinstance(panels, list) else []:
            if not isinstance(panel, dict):
                continue
            for target in panel.get("targets") or []:
                if isinstance(target, dict) and isinstance(target.get("expr"), str):
                    found.append(target["expr"])
            walk(panel.get("panels"))

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


# A line git leaves in a file whose merge conflicted (a stored upstream version of SGLang's
# dashboard had them): <<<<<<< ours, ||||||| base (diff3), =======, >>>>>>> theirs.
_CONFLICT_MARKER = re.compile(r"^(?:<{7}|\|{7}|>{7})(?: |$)|^={7}$", re.MULTILINE)


def known_sglang_metrics() -> set[str]:
    """The SGLang metric families this project checked against the release's real /metrics
    (tests/unit/test_monitoring.py): those SGLang's dashboard reads and those the alert
    rules read (data/monitoring.toml)."""
    conf = data.monitoring()
    known = set(conf.grafana.sglang_dashboard_metrics)
    for alert in conf.alerts:
        known |= metric_names(alert.expr, "sglang")
    return known


def dashboard_refusal(content: bytes | str, known: set[str] | None = None) -> str | None:
    """Why a downloaded SGLang dashboard must not be provisioned, or None when it may: no
    merge-conflict marker, UTF-8 JSON of a dashboard object with panels, and every query's
    SGLang metric (``sglang...``, the OpenMetrics-escaped ``sglang_`` included) a family of
    ``known`` (default known_sglang_metrics()), a histogram's series included."""
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError as error:
            return f"not UTF-8 text (byte {error.start})"
    marker = _CONFLICT_MARKER.search(content)
    if marker:
        line = content.count("\n", 0, marker.start()) + 1
        return f"git merge-conflict marker {marker.group(0)[:7]!r} on line {line}"
    try:
        dashboard = json.loads(content)
    except json.JSONDecodeError as error:
        return f"not valid JSON: {error}"
    if not isinstance(dashboard, dict):
        return f"not a dashboard: the JSON is a {type(dashboard).__name__}, not an object"
    panels = dashboard.get("panels")
    if not isinstance(panels, list) or not panels:
        return "not a dashboard: no panels"
    if not all(isinstance(panel, dict) for panel in panels):
        return "not a dashboard: a panel is not an object"
    known = known_sglang_metrics() if known is None else known
    unknown = sorted(
        {
            name
            for expr in dashboard_expressions(dashboard)
            for name in metric_names(expr, "sglang")
            if not exposed_family(name, known)
        }
    )
    if unknown:
        return (
            f"its queries read {', '.join(unknown)}, not among the SGLang metrics checked "
            "against the release's /metrics (data/monitoring.toml [grafana] "
            "sglang_dashboard_metrics)"
        )
    return None


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
