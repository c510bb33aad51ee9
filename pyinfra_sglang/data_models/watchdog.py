"""The model of pyinfra_sglang/data/watchdog.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class WatchdogUnits(DataModel):
    service: str
    timer: str


class WatchdogProgram(DataModel):
    dir: str
    main: str
    beside: tuple[str, ...]


class WatchdogState(DataModel):
    directory: str
    file: str
    history: int


class WatchdogCheck(DataModel):
    expect: str
    accuracy_s: int


class Watchdog(DataModel):
    units: WatchdogUnits
    program: WatchdogProgram
    state: WatchdogState
    check: WatchdogCheck
