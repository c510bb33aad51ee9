"""The model of pyinfra_sglang/data/memory_fit.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number


class MemoryFitMtp(DataModel):
    draft_overhead_gb: Number


class MemoryFit(DataModel):
    unset_mem_fraction_static: Number
    mtp: MemoryFitMtp
