"""The model of pyinfra_sglang/data/apt.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class Apt(DataModel):
    lock_timeout_s: int
    update_attempts: int
    update_retry_delay_s: int
