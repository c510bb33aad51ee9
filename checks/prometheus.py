"""Prometheus on the monitoring host, read for the audit (pyinfra_sglang/audit/monitoring.py):
its /api/v1/targets, asked on the host itself."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.prometheus import ScrapeTarget, parse_targets


class PrometheusTargets(FactBase[list[ScrapeTarget] | None]):
    """The active targets of the Prometheus at ``url`` (its /api/v1/targets); None when it
    does not answer."""

    def command(self, url: str) -> str:
        api = url.rstrip("/") + "/api/v1/targets?state=active"
        return f"curl -fsS --max-time 10 {shlex.quote(api)} 2>/dev/null || true"

    def process(self, output) -> list[ScrapeTarget] | None:
        return parse_targets("\n".join(output))
