"""The model of pyinfra_sglang/data/attention_backends.toml."""

from __future__ import annotations

from typing import Literal

from pyinfra_sglang.arch import SmArch
from pyinfra_sglang.data_models.base import DataModel, Release


class SparseBackend(DataModel):
    archs: tuple[SmArch, ...]
    source: str
    since: Release | None = None
    kv_cache_dtypes: tuple[str, ...] | None = None
    phases: tuple[Literal["prefill", "decode"], ...] = ("prefill", "decode")


class AttentionBackends(DataModel):
    sparse: dict[str, SparseBackend]
