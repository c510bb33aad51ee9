"""The watchdog in the audit (inventory ``sglang_watchdog``): its timer's state and what its
state file says (pyinfra_sglang/host_programs/watchdog.py writes it): the last decode check,
failures in a row, the last restarts and whether it holds off at its hourly limit. Pure:
judged from what checks/audit.py read, so a recorded report judges again the same."""

from __future__ import annotations

import time

from pyinfra_sglang.audit.findings import Finding

HOUR_S = 3600.0
SHOWN_RESTARTS = 3


def _when(epoch: object) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(epoch)))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return "?"


def _restart_text(entry: dict) -> str:
    outcome = entry.get("outcome")
    ended = (
        "healthy again"
        if outcome == "healthy"
        else ("not finished" if outcome is None else f"did not come back: {outcome}")
    )
    return f"{_when(entry.get('at'))} ({entry.get('reason')}; {ended})"


def findings_for_watchdog(enabled: bool, reading: dict | None) -> list[Finding]:
    """``reading``: {"timer": SystemdUnitState of the timer, "state": the state file's JSON
    or None}; None when the audit did not read it (the watchdog is off, or a record made
    before)."""
    if not enabled or reading is None:
        return []
    timer = reading.get("timer") or {}
    state = reading.get("state")
    timer_name = reading.get("timer_unit", "sglang-watchdog.timer")
    missing = timer.get("LoadState") in (None, "not-found")
    timer_state = (
        "not installed" if missing else f"{timer.get('ActiveState')}/{timer.get('SubState')}"
    )
    if missing or timer.get("ActiveState") != "active":
        return [
            Finding(
                "warn",
                "watchdog",
                f"sglang_watchdog is on but {timer_name} is {timer_state}: nothing checks the "
                "server's decode. Apply `pyinfra INVENTORY deploy/site.py`.",
                evidence={"timer": timer},
            )
        ]
    if not isinstance(state, dict):
        return [
            Finding(
                "ok",
                "watchdog",
                f"{timer_name} runs; no decode check yet (the first comes one interval "
                "after the timer started).",
                evidence={"timer": timer},
            )
        ]
    failures = int(state.get("failures") or 0)
    last = state.get("last_check") or {}
    verdict = {True: "passed", False: "failed", None: "skipped"}.get(last.get("ok"), "skipped")
    evidence = {
        "failures_in_a_row": failures,
        "last_check": last,
        "restarts": state.get("restarts") or [],
        "held": state.get("held"),
    }
    findings = [
        Finding(
            "warn" if failures else "ok",
            "watchdog",
            f"{timer_name} runs; its last decode check at {_when(last.get('at'))} {verdict} "
            f"({last.get('reason')}); {failures} failed in a row."
            + (" Read `journalctl -u sglang-watchdog.service`." if failures else ""),
            evidence=evidence,
        )
    ]
    restarts = [entry for entry in state.get("restarts") or [] if isinstance(entry, dict)]
    if not restarts:
        return findings
    newest = restarts[-1]
    shown = "; ".join(_restart_text(entry) for entry in reversed(restarts[-SHOWN_RESTARTS:]))
    held = state.get("held")
    check_at = float(last.get("at") or 0)
    recent = [entry for entry in restarts if check_at - float(entry.get("at") or 0) < HOUR_S]
    if held and failures:
        level, what = (
            "fail",
            f"it reached its limit of restarts an hour and restarts nothing before "
            f"{_when(held.get('until'))}, while the server still fails its decode check: "
            "look at `journalctl -u sglang.service`",
        )
    elif newest.get("outcome") not in ("healthy", None):
        level, what = (
            "fail",
            "the server did not come back after its last restart: look at "
            "`journalctl -u sglang.service`",
        )
    elif recent:
        level, what = "warn", f"{len(recent)} within the hour before its last check"
    else:
        level, what = "ok", "none within the hour before its last check"
    findings.append(
        Finding(
            level,
            "watchdog-restarts",
            f"The watchdog restarted the server {len(restarts)} time(s) on record, the last: "
            f"{shown}; {what}.",
            evidence={"restarts": restarts, "held": held},
        )
    )
    return findings
