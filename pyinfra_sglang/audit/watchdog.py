"""The watchdog in the audit (inventory ``sglang_watchdog``): its timer's state and what its
state file says (pyinfra_sglang/host_programs/watchdog.py writes it): the last decode check,
failures in a row, the last restarts and whether it holds off at its hourly limit. Pure:
judged from what checks/audit.py read, so a recorded report judges again the same.

The state is checked field by field as the watchdog itself reads it (its ``check_state``): a
field of the wrong type or out of range, or a time that is not finite or lies ahead (of the
watchdog's last check, or of ``now`` when the caller gives it), is left out and said in a
`warn`; the judge says nothing "ok" about what it could not read."""

from __future__ import annotations

import time

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.host_programs.watchdog import check_state, problem_lines

HOUR_S = 3600.0
SHOWN_RESTARTS = 3
TIMER_UNIT = "sglang-watchdog.timer"
JOURNAL = "Read `journalctl -u sglang-watchdog.service`."


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


def findings_for_watchdog(
    enabled: bool, reading: dict | None, now: float | None = None
) -> list[Finding]:
    """``reading``: {"timer": SystemdUnitState of the timer, "state": the state file's JSON
    or None}; None when the audit did not read it (the watchdog is off, or a record made
    before). ``now``: the audit's clock, when the caller has it; without it, times in the
    state are judged against its own last check."""
    if not enabled or reading is None:
        return []
    if not isinstance(reading, dict):
        return [
            Finding(
                "warn",
                "watchdog",
                f"the audit's reading of the watchdog is a {type(reading).__name__}, not an "
                "object: nothing about the watchdog could be judged. Run the audit again.",
            )
        ]
    timer = reading.get("timer")
    timer = timer if isinstance(timer, dict) else {}
    timer_name = reading.get("timer_unit")
    timer_name = timer_name if isinstance(timer_name, str) else TIMER_UNIT
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
    raw = reading.get("state")
    if raw is None and reading.get("state_present"):
        return [
            Finding(
                "warn",
                "watchdog",
                f"{timer_name} runs, but its state file could not be read: it is there and "
                "holds no JSON object (empty, cut off, not UTF-8, or nested too deep), so "
                f"nothing is known of its checks and restarts. {JOURNAL}",
                evidence={"timer": timer},
            )
        ]
    if raw is None:
        return [
            Finding(
                "ok",
                "watchdog",
                f"{timer_name} runs; no decode check yet (the first comes one interval "
                "after the timer started).",
                evidence={"timer": timer},
            )
        ]
    clock = "the audit's clock" if now is not None else "this host's clock"
    state, problems = check_state(raw, now, clock)
    unreadable = problem_lines(problems)
    unread = {field for field, _ in problems}
    if "top level" in unread:
        return [
            Finding(
                "warn",
                "watchdog",
                f"{timer_name} runs, but its state file could not be read: {unreadable[0]}. "
                f"{JOURNAL}",
                evidence={"timer": timer, "unreadable": unreadable},
            )
        ]
    checks = _checks_finding(timer_name, state, unreadable, unread)
    restarts = _restarts_finding(state, unread)
    return [checks] + ([restarts] if restarts else [])


def _checks_finding(timer_name: str, state: dict, unreadable: list[str], unread: set) -> Finding:
    """``watchdog``: its last decode check and the failures in a row."""
    failures = state["failures"]
    last = state["last_check"]
    if last is not None:
        verdict = {True: "passed", False: "failed", None: "skipped"}[last["ok"]]
        checked = f"its last decode check at {_when(last['at'])} {verdict} ({last['reason']})"
    else:
        checked = "no decode check on record"
    counted = "failures in a row unknown" if "failures" in unread else f"{failures} failed in a row"
    evidence = {
        "failures_in_a_row": failures,
        "last_check": last or {},
        "restarts": state["restarts"],
        "held": state["held"],
    }
    if unreadable:
        evidence["unreadable"] = unreadable
    message = f"{timer_name} runs; {checked}; {counted}."
    if unreadable:
        message += f" Its state file could not be read in full: {'; '.join(unreadable)}."
    return Finding(
        "warn" if failures or unreadable else "ok",
        "watchdog",
        message + (f" {JOURNAL}" if failures or unreadable else ""),
        evidence=evidence,
    )


def _restarts_finding(state: dict, unread: set) -> Finding | None:
    """``watchdog-restarts``: the restarts on record, judged by the newest and the hour before
    the last check; None without any."""
    restarts = state["restarts"]
    if not restarts:
        return None
    failures, last, held = state["failures"], state["last_check"], state["held"]
    newest = restarts[-1]
    shown = "; ".join(_restart_text(entry) for entry in reversed(restarts[-SHOWN_RESTARTS:]))
    check_at = last["at"] if last is not None else 0.0
    recent = [entry for entry in restarts if check_at - entry["at"] < HOUR_S]
    if held and failures:
        level, what = (
            "fail",
            f"it reached its limit of restarts an hour and restarts nothing before "
            f"{_when(held['until'])}, while the server still fails its decode check: "
            "look at `journalctl -u sglang.service`",
        )
    elif newest["outcome"] not in ("healthy", None):
        level, what = (
            "fail",
            "the server did not come back after its last restart: look at "
            "`journalctl -u sglang.service`",
        )
    elif recent:
        level, what = "warn", f"{len(recent)} within the hour before its last check"
    else:
        level, what = "ok", "none within the hour before its last check"
    if level == "ok" and unread & {"restarts", "last_check"}:
        level, what = "warn", what + "; but not all of its record could be read"
    return Finding(
        level,
        "watchdog-restarts",
        f"The watchdog restarted the server {len(restarts)} time(s) on record, the last: "
        f"{shown}; {what}.",
        evidence={"restarts": restarts, "held": held},
    )
