"""Prometheus's ``GET /api/v1/targets`` answer -> each active target's job, address, host
label, health and last error. Format: Prometheus HTTP API, "Targets"
(https://prometheus.io/docs/prometheus/latest/querying/api/#targets): {"status":
"success", "data": {"activeTargets": [{"labels": {...}, "scrapeUrl", "health": "up" |
"down" | "unknown", "lastError"}, ...]}}."""

from __future__ import annotations

import json
from typing import TypedDict


class ScrapeTarget(TypedDict):
    job: str
    instance: str
    host: str  # the inventory name (pyinfra-sglang's `host` label), "" when absent
    health: str
    error: str


def parse_targets(text: str) -> list[ScrapeTarget] | None:
    """The active targets, in the job and instance order; None when ``text`` is not a
    successful answer of that API."""
    try:
        answer = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        return None
    active = (answer.get("data") or {}).get("activeTargets")
    if not isinstance(active, list):
        return None
    targets: list[ScrapeTarget] = []
    for entry in active:
        if not isinstance(entry, dict):
            continue
        labels = entry.get("labels") or {}
        targets.append(
            ScrapeTarget(
                job=str(labels.get("job", "")),
                instance=str(labels.get("instance", "")),
                host=str(labels.get("host", "")),
                health=str(entry.get("health", "unknown")),
                error=str(entry.get("lastError") or ""),
            )
        )
    return sorted(targets, key=lambda t: (t["job"], t["instance"]))
