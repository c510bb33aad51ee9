"""The model of pyinfra_sglang/data/parallelism.toml."""

from __future__ import annotations

from pyinfra_sglang.arch import SmArch
from pyinfra_sglang.data_models.base import DataModel, Number, Release


class A2aChoices(DataModel):
    since: Release
    backends: tuple[str, ...]


class A2a(DataModel):
    not_nvidia: tuple[str, ...]
    choices: tuple[A2aChoices, ...]


class EpOneOrAll(DataModel):
    quantization: str
    archs: tuple[SmArch, ...]


class ParallelismEstimate(DataModel):
    activation_bytes: Number
    pcie_only_busbw_gbs: Number
    nvlink_share_of_table: Number


class Parallelism(DataModel):
    a2a: A2a
    ep_one_or_all: tuple[EpOneOrAll, ...]
    estimate: ParallelismEstimate
