"""The model of pyinfra_sglang/data/gpus.toml."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, RootModel, model_validator

from pyinfra_sglang.arch import SmArch
from pyinfra_sglang.data_models.base import DataModel, Number, named_by_key


class Gpu(DataModel):
    """One GPU model; ``name`` is its key in gpus.toml, as nvidia-smi prints it."""

    name: str
    arch: SmArch
    memory_gb: Number
    memory_bandwidth_gbs: Number
    pcie_gen: int
    nvlink: bool
    nvlink_bandwidth_gbs: Number
    # Dense (no sparsity) bf16 tensor rate, TFLOP/s: the prefill (compute) roofline.
    dense_bf16_tflops: Number | None = None


class Gpus(RootModel[dict[str, Gpu]]):
    """GPU name as nvidia-smi prints it -> its numbers."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, values: Any) -> Any:
        return named_by_key(values)
