"""The model of pyinfra_sglang/data/pcie.toml."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel, Number


class PcieGeneration(DataModel):
    transfer_rate_gts: Number
    encoding: str


class Acs(DataModel):
    redirect_flags: tuple[str, ...]


class PeerProbe(DataModel):
    timeout_s: Number


class Pcie(DataModel):
    # The file's tables [1] .. [6]: PCIe generation -> its rate and encoding.
    generations: dict[int, PcieGeneration]
    acs: Acs
    peer_probe: PeerProbe

    @model_validator(mode="before")
    @classmethod
    def _generations_are_numbered_tables(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        rest = {k: v for k, v in values.items() if not k.isdigit()}
        return {**rest, "generations": {k: v for k, v in values.items() if k.isdigit()}}
