"""Rolling driver upgrades across the fleet (roles/driver_rollout.py): how many serving hosts
may be out at once, and the operator's own out-of-service mark."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool

from pyinfra_sglang.config.types import FieldGroup, allowed

_PERCENT = re.compile(r"^(100|[1-9][0-9]?)%$")


# NVIDIA's GPU Operator upgrades one node at a time by default (maxParallelUpgrades: 1;
# docs/sources.md#rolling-driver-upgrades): so does a fleet here, unless told otherwise.
DEFAULT_MAX_UNAVAILABLE = 1
# The value that turns rollouts off: serving hosts change their driver together.
OFF = "off"


def count_or_percent(value: Any) -> Any:
    """A whole number of hosts, or "N%" of the inventory's hosts (1% .. 100%); "off" (or an
    explicit None): no rollout, hosts change together."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a number of hosts or a percentage is expected, not true/false")
    if isinstance(value, int):
        if value < 1:
            raise ValueError("at least 1 host")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == OFF:
            return None
        if text.isdigit():
            return count_or_percent(int(text))
        if _PERCENT.match(text):
            return text
    raise ValueError(
        'a whole number of hosts (1 or more), a percentage ("25%", 1% .. 100%), or "off"'
    )


class RolloutFields(FieldGroup):
    """Rolling driver upgrades, a few serving hosts out of their router at a time.

    A serving host whose driver or Fabric Manager changes leaves its router, is upgraded and
    validated, and rejoins (roles/driver_rollout.py)."""

    driver_rollout_max_unavailable: Annotated[
        int | str | None, BeforeValidator(count_or_percent)
    ] = Field(
        DEFAULT_MAX_UNAVAILABLE,
        description=(
            "Roll driver changes through the fleet: at most this many serving hosts out of "
            "service at once while their driver or Fabric Manager changes (a percentage counts "
            'the inventory\'s hosts, rounded up; hosts already out count too). "off": '
            "serving hosts change their driver together, without turns or validation."
        ),
        json_schema_extra=allowed('a whole number, 1 or more, a percentage ("25%"), or "off"'),
    )

    out_of_service: StrictBool = Field(
        False,
        description=(
            "The operator took this host out of service: a rollout upgrades it without taking "
            "a turn and does not put it back behind its router while it is marked (as does a "
            "file /etc/pyinfra-sglang/out-of-service on the host)."
        ),
        json_schema_extra=allowed("true, false"),
    )
