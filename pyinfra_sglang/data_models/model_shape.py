"""The model of pyinfra_sglang/data/model_shape.toml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pyinfra_sglang.data_models.base import DataModel, Number


class WeightFormat(DataModel):
    bits: int = Field(ge=1, le=32)
    bits_key: str | None = None
    scale_bytes: Number = Field(ge=0)
    zero_point: bool = False
    group_size: int = Field(ge=0)
    group_size_key: str | None = None
    exclude_key: str
    quantizes: Literal["linear", "experts"]
    # The profile's quantization (--quantization) where SGLang does not read it from
    # config.json itself.
    profile_quantization: str | None = None
    # The GPU architectures whose kernels run the format (unset: any).
    archs: tuple[str, ...] | None = None


class ModelFilesRead(DataModel):
    max_config_bytes: int = Field(ge=1024)
    cache_folder: str


class KvCacheSizing(DataModel):
    swa_full_tokens_ratio: Number = Field(gt=0, le=1)
    dsa_block: int = Field(ge=1)
    dsa_scale_bytes: int = Field(ge=0)
    dsa_rope_bytes: int = Field(ge=1)
    dsa_plain_fp8_backends: tuple[str, ...]


class ModelShapeData(DataModel):
    read: ModelFilesRead
    qk_norm_model_types: tuple[str, ...]
    kv_cache: KvCacheSizing
    dtype_bytes: dict[str, int]
    kv_cache_dtype_bytes: dict[str, int]
    quantization: dict[str, WeightFormat]
