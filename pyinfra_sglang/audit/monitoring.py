"""The monitoring host in the audit (inventory ``monitoring_role = "server"``): whether
each target Prometheus scrapes is up, read from Prometheus's own /api/v1/targets on that
host. Pure: judged from what checks/audit.py read, so a recorded report judges again the
same."""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding

SHOWN = 8


def findings_for_monitoring(enabled: bool, reading: dict | None) -> list[Finding]:
    """``reading``: {"url": the API's URL, "targets": parse_targets' list or None when
    Prometheus did not answer}; None when not read (not the monitoring host, or a record made
    before)."""
    if not enabled or reading is None:
        return []
    url = reading.get("url", "Prometheus")
    targets = reading.get("targets")
    if targets is None:
        return [
            Finding(
                "fail",
                "monitoring",
                f"Prometheus does not answer at {url}: nothing is scraped or alerted on. "
                "Check `systemctl status prometheus`; apply `pyinfra INVENTORY deploy/site.py`.",
            )
        ]
    down = [t for t in targets if t.get("health") != "up"]
    evidence = {"targets": targets}
    if not targets:
        return [
            Finding(
                "warn",
                "monitoring",
                f"Prometheus at {url} scrapes no target: its config is not the rendered one.",
                evidence=evidence,
            )
        ]
    if not down:
        jobs = sorted({t["job"] for t in targets})
        return [
            Finding(
                "ok",
                "monitoring",
                f"all {len(targets)} targets up ({', '.join(jobs)})",
                evidence=evidence,
            )
        ]
    shown = "; ".join(
        f"{t['job']} {t['instance']}"
        + (f" ({t['host']})" if t.get("host") else "")
        + (f": {t['error']}" if t.get("error") else f": {t.get('health')}")
        for t in down[:SHOWN]
    )
    more = f" and {len(down) - SHOWN} more" if len(down) > SHOWN else ""
    return [
        Finding(
            "warn",
            "monitoring",
            f"{len(down)} of {len(targets)} targets down: {shown}{more}. A down SGLang server "
            "fires SglangServerDown; see docs/monitoring.md.",
            evidence=evidence,
        )
    ]
