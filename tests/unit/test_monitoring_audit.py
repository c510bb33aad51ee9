"""The audit's `monitoring` line: Prometheus's /api/v1/targets read on the monitoring host,
judged by a pure function."""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra_sglang.audit.monitoring import findings_for_monitoring
from pyinfra_sglang.audit.record import AuditExpectations, AuditFacts, monitoring_url
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.parsers.prometheus import parse_targets


def _answer(*targets: tuple[str, str, str, str]) -> str:
    # The shape of Prometheus's answer (HTTP API docs, "Targets"), with the fields read.
    return json.dumps(
        {
            "status": "success",
            "data": {
                "activeTargets": [
                    {
                        "discoveredLabels": {},
                        "labels": {"instance": instance, "job": job, "host": host},
                        "scrapePool": job,
                        "scrapeUrl": f"http://{instance}/metrics",
                        "lastError": error,
                        "lastScrape": "2026-12-03T20:00:00Z",
                        "lastScrapeDuration": 0.01,
                        "health": "up" if not error else "down",
                    }
                    for job, instance, host, error in targets
                ],
                "droppedTargets": [],
            },
        }
    )


UP = ("sglang", "10.0.0.11:30000", "gpu-1", "")
DOWN = (
    "node",
    "10.0.0.12:9100",
    "gpu-2",
    'Get "http://10.0.0.12:9100/metrics": connection refused',
)


def test_targets_are_parsed_in_job_and_instance_order():
    targets = parse_targets(_answer(UP, DOWN))
    assert [t["job"] for t in targets] == ["node", "sglang"]
    assert targets[0]["health"] == "down" and "connection refused" in targets[0]["error"]
    assert parse_targets("") is None and parse_targets('{"status": "error"}') is None


def test_all_up_is_ok_naming_the_jobs():
    (finding,) = findings_for_monitoring(True, {"url": "u", "targets": parse_targets(_answer(UP))})
    assert (finding.level, finding.code) == ("ok", "monitoring")
    assert finding.message == "all 1 targets up (sglang)"


def test_a_down_target_warns_naming_it_and_prometheus_error():
    reading = {"url": "u", "targets": parse_targets(_answer(UP, DOWN))}
    (finding,) = findings_for_monitoring(True, reading)
    assert finding.level == "warn"
    assert "1 of 2 targets down: node 10.0.0.12:9100 (gpu-2): Get" in finding.message


def test_prometheus_silent_fails_and_off_says_nothing():
    (finding,) = findings_for_monitoring(True, {"url": "http://127.0.0.1:9090", "targets": None})
    assert finding.level == "fail" and "http://127.0.0.1:9090" in finding.message
    assert findings_for_monitoring(False, None) == []
    assert findings_for_monitoring(True, None) == []


def test_only_the_monitoring_server_is_asked_and_records_before_still_load():
    assert monitoring_url(HostConfig()) is None
    server = HostConfig(monitoring_role="server", grafana_admin_password_file=Path("p"))
    assert monitoring_url(server) == "http://127.0.0.1:9090"
    # Records made before have neither: both default to "not read".
    assert AuditFacts.__dataclass_fields__["monitoring"].default is None
    assert AuditExpectations.__dataclass_fields__["monitoring_url"].default is None
