"""The check SGLang's downloaded dashboard passes before Grafana is given it: the queries of
SGLang's real dashboard pass (as Prometheus answered them on the H200 machine); a file with
merge-conflict markers, bad JSON, no panels, or a query of a metric nobody checked against
the release is refused, saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyinfra_sglang.monitoring.dashboards import dashboard_refusal, known_sglang_metrics

REAL = Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/monitoring"


def _real_queries() -> list[str]:
    """The queries of SGLang's dashboard (commit bac2cc67) as asked of the real Prometheus,
    with Grafana's $__rate_interval put back."""
    run = json.loads((REAL / "prometheus.json").read_text())
    return [
        q["expr"].replace("[30s]", "[$__rate_interval]")
        for q in run["queries"]
        if not q["panel"].startswith(("alert ", "ALERTS"))
    ]


def _dashboard(queries: list[str]) -> dict:
    targets = [{"refId": chr(65 + i), "expr": expr} for i, expr in enumerate(queries)]
    # A row holding the panels, as SGLang's dashboard nests some: nested ones count too.
    return {
        "title": "SGLang Dashboard",
        "panels": [{"type": "row", "panels": [{"type": "timeseries", "targets": targets}]}],
    }


def _text(dashboard: dict) -> bytes:
    return json.dumps(dashboard, indent=2).encode()


def test_sglangs_real_dashboard_queries_pass():
    queries = _real_queries()
    assert len(queries) == 14
    assert dashboard_refusal(_text(_dashboard(queries))) is None


def test_merge_conflict_markers_are_refused_with_their_line():
    good = _text(_dashboard(_real_queries())).decode().splitlines()
    conflicted = "\n".join(
        good[:3] + ["<<<<<<< HEAD", good[3], "=======", good[3], ">>>>>>> upstream"] + good[4:]
    )
    reason = dashboard_refusal(conflicted.encode())
    assert reason == "git merge-conflict marker '<<<<<<<' on line 4"


def test_a_lone_separator_line_is_a_marker_too():
    assert "'======='" in dashboard_refusal('{"panels": [\n=======\n]}')


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"panels": [', "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
        (b"[]", "the JSON is a list, not an object"),
        (b'{"title": "x", "panels": []}', "no panels"),
        (b'{"panels": ["x"]}', "a panel is not an object"),
    ],
)
def test_what_is_not_a_dashboard_is_refused(content, why):
    reason = dashboard_refusal(content)
    assert reason is not None and why in reason, reason


def test_a_query_of_a_metric_not_checked_against_the_release_is_refused():
    queries = [*_real_queries(), "rate(sglang:made_up_total[5m])", "sglang_num_queue_reqs"]
    reason = dashboard_refusal(_text(_dashboard(queries)))
    assert reason is not None
    assert "sglang:made_up_total, sglang_num_queue_reqs" in reason
    assert "sglang_dashboard_metrics" in reason


def test_the_metrics_the_alerts_read_are_known_too():
    known = known_sglang_metrics()
    assert {
        "sglang:token_usage",
        "sglang:num_queue_reqs",
        "sglang:e2e_request_latency_seconds",
    } <= known
    # Histogram series of a known family pass; label values are not metric names.
    assert (
        dashboard_refusal(_text(_dashboard(['sglang:token_usage{model_name=~"sglang:anything"}'])))
        is None
    )
