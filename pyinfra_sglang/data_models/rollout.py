"""The model of pyinfra_sglang/data/rollout.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class RolloutPaths(DataModel):
    state: str
    out_of_service: str


class RolloutRouter(DataModel):
    change_timeout_s: float


class RolloutValidation(DataModel):
    must_be_ok: tuple[str, ...]
    must_be_ok_serving: tuple[str, ...]
    must_not_fail: tuple[str, ...]
    blocking_warnings: tuple[str, ...]


class Rollout(DataModel):
    paths: RolloutPaths
    router: RolloutRouter
    validation: RolloutValidation
