"""The model of pyinfra_sglang/data/multinode_preflight.toml."""

from __future__ import annotations

from pydantic import Field

from pyinfra_sglang.data_models.base import DataModel


class MultinodePreflight(DataModel):
    size_mib: int = Field(gt=0)
    iterations: int = Field(gt=0)
    min_line_rate_fraction: float = Field(gt=0, le=1)
    kill_after_s: int = Field(gt=0)
    join_timeout_s: int = Field(gt=0)
