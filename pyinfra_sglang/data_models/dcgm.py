"""The model of pyinfra_sglang/data/dcgm.toml."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel

DiagResult = Literal["Fail", "Warn", "Pass", "Skip"]


class DcgmDiag(DataModel):
    levels: tuple[int, ...]
    default_level: int
    timeout_s: dict[str, int]
    results: tuple[DiagResult, ...]
    detail_rows: tuple[str, ...]

    @model_validator(mode="after")
    def _levels_consistent(self) -> DcgmDiag:
        if self.default_level not in self.levels:
            raise ValueError(f"default_level {self.default_level} is not in levels")
        if set(self.timeout_s) != {str(level) for level in self.levels}:
            raise ValueError("timeout_s must give one timeout per level")
        if sorted(self.results) != sorted(("Fail", "Warn", "Pass", "Skip")):
            raise ValueError("results must list Fail, Warn, Pass and Skip once each")
        return self


class DcgmInstall(DataModel):
    packages: dict[str, str]  # CUDA major -> DCGM's package
    install_recommends: bool
    service: str


class Dcgm(DataModel):
    diag: DcgmDiag
    install: DcgmInstall
