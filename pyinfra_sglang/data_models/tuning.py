"""The model of pyinfra_sglang/data/tuning.toml."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from pyinfra_sglang.arch import SmArch
from pyinfra_sglang.data_models.base import DataModel, Release, named_by_key
from pyinfra_sglang.versions import parse_version


class TuningSearch(DataModel):
    order: tuple[str, ...]
    max_rounds: int
    # A server verdict -> the settings tried first when the baseline's diagnosis names it.
    binds_first: dict[str, tuple[str, ...]] = {}


class TuningSetting(DataModel):
    """One profile field the tuner varies (``name``, its key in [settings]). ``requires``:
    other fields' values it only makes sense with (a graph batch size needs CUDA graphs on);
    ``min_sglang_version`` and ``archs`` (CUDA architectures such as ``sm_90``): where it
    applies at all; ``profile_fields``: the profile must set these (expert parallelism needs
    a model with routed experts); ``divides_gpus``: only values that divide the host's GPU
    count (a parallel size)."""

    name: str
    values: tuple[bool | int | float | str, ...]
    profile_fields: tuple[str, ...] = ()
    divides_gpus: bool = False
    requires: dict[str, bool | int | float | str] = {}
    min_sglang_version: Release | None = None
    archs: tuple[SmArch, ...] = ()

    def applies(self, sglang_version: str, arch: str) -> bool:
        if self.min_sglang_version and parse_version(sglang_version) < parse_version(
            self.min_sglang_version
        ):
            return False
        return not self.archs or arch in self.archs

    def allowed_with(self, settings: dict[str, Any]) -> bool:
        return all(settings.get(name) == value for name, value in self.requires.items())


class Tuning(DataModel):
    search: TuningSearch
    settings: dict[str, TuningSetting]

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, values: Any) -> Any:
        if isinstance(values, dict) and "settings" in values:
            return {**values, "settings": named_by_key(values["settings"])}
        return values
