"""The model of pyinfra_sglang/data/gpu_health.toml."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel

HealthAction = Literal[
    "none", "restart-app", "restart-fm", "reset", "drain-reset", "reboot", "replace"
]


class XidEntry(DataModel):
    code: int
    mnemonic: str
    meaning: str
    nvidia: str  # the catalogue's immediate resolution bucket
    action: HealthAction
    level: Literal["warn", "fail"]
    # The action when it is the only Xid read (the catalogue's "Solo" branch of a workflow).
    solo_action: HealthAction | None = None


class NvlinkHealth(DataModel):
    error_counters: tuple[str, ...]


class ClockHealth(DataModel):
    query: tuple[str, ...]
    min_share: float


class GpuHealth(DataModel):
    actions: dict[HealthAction, str]
    xid: tuple[XidEntry, ...]
    xid_154: dict[str, HealthAction]
    smi_q: dict[str, tuple[tuple[str, ...], ...]]
    nvlink: NvlinkHealth
    clocks: ClockHealth

    @model_validator(mode="after")
    def _one_entry_per_xid(self) -> GpuHealth:
        codes = [entry.code for entry in self.xid]
        if len(codes) != len(set(codes)):
            raise ValueError("an Xid listed twice")
        return self
