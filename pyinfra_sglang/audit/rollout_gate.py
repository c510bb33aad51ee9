"""Whether the audit's findings let a host a driver rollout took out of service back behind
its router (data/rollout.toml [validation]; roles/driver_rollout.py asks)."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding


def validation_problems(findings: list[Finding], serving: bool) -> list[str]:
    """Why the audit's findings keep a host out of its router; [] when it may rejoin. A
    check the gate needs that the audit did not report ok is a problem too: only what was
    read and passed lets a host back."""
    rules = data.rollout().validation
    problems = [
        f"{f.code}: {f.message}"
        for f in findings
        if (f.level == "fail" and f.code in rules.must_not_fail)
        or (f.level == "warn" and f.code in rules.blocking_warnings)
    ]
    needed = (*rules.must_be_ok, *(rules.must_be_ok_serving if serving else ()))
    passed = {f.code for f in findings if f.level == "ok"}
    problems += [f"{code}: not read as ok" for code in needed if code not in passed]
    return problems
