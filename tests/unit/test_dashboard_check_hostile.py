"""Hostile dashboards given to the check SGLang's downloaded dashboard passes before Grafana
gets it (monitoring/dashboards.py dashboard_refusal): each is refused, saying what and where,
in bounded time and without a traceback; SGLang's real dashboard (its structure as upstream
has it at commit bac2cc67, the queries as the real Prometheus answered them) still passes."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.monitoring.dashboards import dashboard_refusal

REAL = Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/monitoring"
UID = data.monitoring().grafana.datasource_uid


def _real_queries() -> list[str]:
    """The 14 queries of SGLang's dashboard as upstream writes them ($__rate_interval,
    "$model_name", the CRLF some end with)."""
    run = json.loads((REAL / "prometheus.json").read_text())
    return [
        q["expr"].replace("[30s]", "[$__rate_interval]").replace('".*"', '"$model_name"') + "\r\n"
        for q in run["queries"]
        if not q["panel"].startswith(("alert ", "ALERTS"))
    ]


def _variable(name: str, label: str, current: str) -> dict:
    return {
        "current": {"text": current, "value": current},
        "datasource": {"type": "prometheus"},
        "definition": f"label_values({label})",
        "includeAll": False,
        "name": name,
        "options": [],
        "query": {
            "qryType": 1,
            "query": f"label_values({label})",
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 1,
        "type": "query",
    }


def real_dashboard() -> dict:
    """SGLang's dashboard as upstream shapes it: the built-in annotation, panels on the
    default Prometheus datasource whose targets name the provisioned uid, two label_values
    variables with their saved values."""
    panels = [
        {
            "datasource": {"default": True, "type": "prometheus"},
            "id": 10 + number,
            "title": f"Panel {number}",
            "type": "timeseries",
            "targets": [
                {
                    "datasource": {"type": "prometheus", "uid": UID},
                    "editorMode": "code",
                    "expr": expr,
                    "refId": "A",
                }
            ],
        }
        for number, expr in enumerate(_real_queries())
    ]
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "panels": panels,
        "templating": {
            "list": [
                _variable("instance", "instance", "127.0.0.1:30000"),
                _variable("model_name", "model_name", "meta-llama/Llama-3.1-8B-Instruct"),
            ]
        },
        "title": "SGLang Dashboard",
        "uid": "sglang-dashboard",
    }


def _text(dashboard: dict) -> bytes:
    return json.dumps(dashboard, indent=2).encode()


def _refused(dashboard: dict | bytes) -> str:
    content = dashboard if isinstance(dashboard, bytes) else _text(dashboard)
    started = time.monotonic()
    reason = dashboard_refusal(content)
    assert time.monotonic() - started < 5
    assert reason is not None
    return reason


def _with_target(expr: str, **target) -> dict:
    dashboard = real_dashboard()
    dashboard["panels"][0]["targets"].append({"refId": "Z", "expr": expr, **target})
    return dashboard


def test_the_real_dashboard_passes():
    assert len(real_dashboard()["panels"]) == 14
    assert dashboard_refusal(_text(real_dashboard())) is None


def test_a_file_over_the_size_cap_is_refused_before_it_is_parsed():
    dashboard = real_dashboard()
    dashboard["description"] = "x" * (2 * 1024 * 1024)
    reason = _refused(dashboard)
    assert "bytes" in reason and "2 MiB" in reason


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deep_nesting_is_refused_without_a_recursion_error(depth):
    text = '{"panels": [{"title": "deep", "options": ' + "[" * depth + "]" * depth + "}]}"
    reason = _refused(text.encode())
    assert "nested" in reason and "64" in reason


def test_a_number_too_long_to_read_is_refused_not_raised():
    reason = _refused(b'{"panels": [{"id": ' + b"9" * 5000 + b"}]}")
    assert "not valid JSON" in reason


def test_a_templating_query_of_another_metric_is_refused_naming_the_variable():
    dashboard = real_dashboard()
    variable = _variable("host", "nodename", "gpu-1")
    variable["query"]["query"] = variable["definition"] = "label_values(node_uname_info, nodename)"
    dashboard["templating"]["list"].append(variable)
    reason = _refused(dashboard)
    assert "node_uname_info" in reason and "templating variable 'host'" in reason


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("query_result(up)", "up"),
        ("label_values(__name__)", "__name__"),
        ("metrics(.*)", "metrics()"),
        ("label_values(sglang:num_queue_reqs, $label)", "variable"),
    ],
)
def test_templating_queries_that_reach_other_metrics_are_refused(query, why):
    dashboard = real_dashboard()
    dashboard["templating"]["list"][0]["query"] = query  # the older plain-string form
    reason = _refused(dashboard)
    assert why in reason and "templating variable 'instance'" in reason


def test_a_bad_definition_alone_is_refused():
    dashboard = real_dashboard()
    dashboard["templating"]["list"][1]["definition"] = "label_values(node_cpu_seconds_total, cpu)"
    assert "node_cpu_seconds_total" in _refused(dashboard)


def test_a_constant_variable_that_could_break_out_of_a_query_string_is_refused():
    dashboard = real_dashboard()
    dashboard["templating"]["list"].append(
        {"name": "evil", "type": "constant", "query": '"} or node_cpu_seconds_total{a="'}
    )
    reason = _refused(dashboard)
    assert "templating variable 'evil'" in reason


@pytest.mark.parametrize("where", ["expr", "target"])
def test_an_annotation_query_is_checked(where):
    dashboard = real_dashboard()
    query = "changes(node_boot_time_seconds[5m]) > 0"
    annotation = {
        "name": "reboots",
        "enable": True,
        "datasource": {"type": "prometheus", "uid": UID},
    }
    annotation.update({"expr": query} if where == "expr" else {"target": {"expr": query}})
    dashboard["annotations"]["list"].append(annotation)
    reason = _refused(dashboard)
    assert "node_boot_time_seconds" in reason and "annotation 'reboots'" in reason


@pytest.mark.parametrize(
    "expr",
    [
        '{__name__=~"node_.*"}',
        'sglang:num_running_reqs or {__name__="up"}',
        'rate({"__name__"=~".+"}[5m])',
    ],
)
def test_a_name_selector_is_refused_naming_the_panel(expr):
    reason = _refused(_with_target(expr))
    assert "__name__" in reason and "panel 'Panel 0' (id 10)" in reason


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ('{job="node"}', "no metric name"),
        ('{"node_cpu_seconds_total"}', "node_cpu_seconds_total"),
        ("up", "up"),
        ("rate($metric[5m])", "variable"),
        ("rate([[metric]][5m])", "variable"),
        ('sglang:num_queue_reqs{$label="x"}', "variable"),
        ("sglang:num_queue_reqs; drop", "cannot read"),
    ],
)
def test_queries_that_reach_beyond_the_known_metrics_are_refused(expr, why):
    reason = _refused(_with_target(expr))
    assert why in reason and "target 'Z'" in reason


@pytest.mark.parametrize(
    "datasource",
    [
        {"type": "loki", "uid": "loki-1"},
        {"type": "prometheus", "uid": "another-prometheus"},
        {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
        {"type": "datasource", "uid": "-- Mixed --"},
        "Elasticsearch",
        "$datasource",
        ["not", "a", "datasource"],
    ],
)
@pytest.mark.parametrize("level", ["panel", "target"])
def test_a_foreign_datasource_is_refused(datasource, level):
    dashboard = real_dashboard()
    panel = dashboard["panels"][3]
    (panel if level == "panel" else panel["targets"][0])["datasource"] = datasource
    reason = _refused(dashboard)
    assert "datasource" in reason and "panel 'Panel 3' (id 13)" in reason
    assert UID in reason


def test_a_variables_foreign_datasource_is_refused():
    dashboard = real_dashboard()
    dashboard["templating"]["list"][0]["datasource"] = {"type": "mysql", "uid": "db"}
    reason = _refused(dashboard)
    assert "datasource" in reason and "templating variable 'instance'" in reason


def test_the_grafana_datasource_is_only_for_the_built_in_annotation():
    dashboard = real_dashboard()
    panel = dashboard["panels"][0]
    panel["datasource"] = {"type": "grafana", "uid": "-- Grafana --"}
    assert "datasource" in _refused(dashboard)


def test_rows_nesting_panels_do_not_hide_a_bad_query():
    dashboard = real_dashboard()
    hidden = {"id": 99, "title": "hidden", "targets": [{"refId": "A", "expr": "node_load1"}]}
    inner = {"id": 98, "title": "inner row", "type": "row", "panels": [hidden]}
    dashboard["panels"].append({"id": 97, "title": "outer row", "type": "row", "panels": [inner]})
    reason = _refused(dashboard)
    assert "node_load1" in reason and "panel 'hidden' (id 99)" in reason


def test_the_legacy_rows_list_does_not_hide_a_bad_query():
    dashboard = real_dashboard()
    dashboard["rows"] = [{"title": "old", "panels": [{"id": 5, "targets": [{"expr": "up"}]}]}]
    reason = _refused(dashboard)
    assert "up" in reason and "id 5" in reason


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda p: p.update(panels=["not a panel"]), "is not an object"),
        (lambda p: p.update(panels={"id": 1}), "not a list"),
        (lambda p: p.update(targets={"refId": "A", "expr": "up"}), "targets"),
        (lambda p: p.update(targets="sglang:num_queue_reqs"), "targets"),
        (lambda p: p["targets"].append("up"), "is not an object"),
        (lambda p: p["targets"].append({"refId": "B", "expr": ["up"]}), "expr"),
        (lambda p: p.update(libraryPanel={"uid": "x", "name": "shared"}), "library panel"),
    ],
)
def test_malformed_panels_and_targets_are_refused_with_where(change, why):
    dashboard = real_dashboard()
    change(dashboard["panels"][2])
    reason = _refused(dashboard)
    assert why in reason and "panel 'Panel 2' (id 12)" in reason


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("templating", ["not", "an", "object"]),
        ("templating", {"list": "label_values(up, job)"}),
        ("annotations", {"list": [42]}),
    ],
)
def test_malformed_templating_and_annotations_are_refused(section, value):
    dashboard = real_dashboard()
    dashboard[section] = value
    assert section.rstrip("s") in _refused(dashboard)


def test_a_hostile_title_is_shown_escaped():
    dashboard = _with_target("up")
    dashboard["panels"][0]["title"] = "\x1b[2J\x1b]0;pwned\x07" + "t" * 500
    reason = _refused(dashboard)
    assert "\x1b" not in reason and "\x07" not in reason and len(reason) < 2000


def test_a_dashboard_near_the_cap_is_checked_quickly():
    dashboard = real_dashboard()
    panel = dashboard["panels"][0]
    dashboard["panels"] = [
        {**copy.deepcopy(panel), "id": 1000 + n, "title": f"copy {n}"} for n in range(3000)
    ]
    text = _text(dashboard)
    assert 1024 * 1024 < len(text) < 2 * 1024 * 1024
    started = time.monotonic()
    assert dashboard_refusal(text) is None
    assert time.monotonic() - started < 5
