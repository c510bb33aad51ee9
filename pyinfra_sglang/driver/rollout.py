"""Rolling driver upgrades, the decisions without a host: how many hosts may be out at once,
and the record a host keeps while a rollout has it out of service (roles/driver_rollout.py
acts; whether the audit's findings let a host back: audit/rollout_gate.py)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

# Where a host stands in a rollout, in its record.
OUT = "out"  # taken out of its router, not yet validated on the new driver
FAILED = "failed"  # validation failed: stays out until a re-run validates it


def unavailable_budget(value: int | str, fleet_size: int) -> int:
    """Hosts that may be out of service at once: a count as given, or a percentage of the
    fleet rounded up (a percentage of a small fleet still lets one host go);
    at least 1."""
    if isinstance(value, int):
        return max(1, value)
    percent = int(value.rstrip("%"))
    return max(1, math.ceil(fleet_size * percent / 100))


@dataclass(frozen=True)
class RolloutRecord:
    """What a host keeps while a rollout has it out of service (root's, 0600)."""

    phase: str  # OUT or FAILED
    target: str  # the driver the rollout moves to, in words
    router: str | None  # the router host it was taken out of
    worker_url: str | None  # the URL that router lists it by
    problem: str | None = None

    def text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def read_record(record: dict | None) -> RolloutRecord | None:
    """The record from its JSON object; None for none, or for one this release cannot read
    (the role then treats the host as out, and says the record was unreadable)."""
    if not isinstance(record, dict) or record.get("phase") not in (OUT, FAILED):
        return None
    text = {k: record.get(k) for k in ("target", "router", "worker_url", "problem")}
    if not all(v is None or isinstance(v, str) for v in text.values()):
        return None
    return RolloutRecord(phase=record["phase"], **{**text, "target": text["target"] or ""})
