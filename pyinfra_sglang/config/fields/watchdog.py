"""The watchdog: a timer that asks the server the decode check's question and restarts it
when generation hangs (roles/sglang_watchdog.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool

from pyinfra_sglang.config.types import (
    FieldGroup,
    allowed,
    no_bool,
)

# The watchdog's shortest interval: a decode check takes seconds, a restart minutes.
WATCHDOG_MIN_INTERVAL_S = 30


class WatchdogFields(FieldGroup):
    """The watchdog that restarts a server whose generation hangs."""

    sglang_watchdog: StrictBool = Field(
        False,
        description=(
            "Run a watchdog on the host: a systemd timer asks the server the decode check's "
            "question on loopback every `sglang_watchdog_interval_s`, and restarts it (drain, "
            "health wait) after `sglang_watchdog_failures` failed checks in a row, at most "
            "`sglang_watchdog_max_restarts_per_hour` times an hour. For a server whose "
            "/health answers while generation hangs."
        ),
        json_schema_extra=allowed("true, false; not on a member of sglang_multinode_group"),
    )

    sglang_watchdog_interval_s: Annotated[int, BeforeValidator(no_bool)] = Field(
        300,
        ge=WATCHDOG_MIN_INTERVAL_S,
        le=86400,
        description="Seconds between two decode checks of the watchdog.",
        json_schema_extra=allowed(f"{WATCHDOG_MIN_INTERVAL_S}..86400"),
    )

    sglang_watchdog_timeout_s: Annotated[int, BeforeValidator(no_bool)] = Field(
        120,
        ge=5,
        le=3600,
        description=(
            "Seconds one decode check of the watchdog may take, all its requests together; "
            "longer counts as a failure (reason timeout)."
        ),
        json_schema_extra=allowed("5..3600"),
    )

    sglang_watchdog_failures: Annotated[int, BeforeValidator(no_bool)] = Field(
        3,
        ge=1,
        le=100,
        description=(
            "Failed decode checks in a row after which the watchdog restarts the server. A "
            "check is not counted while the server loads (a refused connection or a 503 "
            "within the profile's `start_timeout_s` of its start, before its first answer) or "
            "works (a timeout while `sglang:realtime_tokens_total` moves): so failures x "
            "interval need not cover a long model load."
        ),
        json_schema_extra=allowed("1..100"),
    )

    sglang_watchdog_max_restarts_per_hour: Annotated[int, BeforeValidator(no_bool)] = Field(
        2,
        ge=1,
        le=60,
        description=(
            "Restarts the watchdog makes within any hour; beyond them it restarts nothing, "
            "says so in the journal, and the audit fails `watchdog-restarts`."
        ),
        json_schema_extra=allowed("1..60"),
    )
