"""The model of pyinfra_sglang/data/model_families.toml."""

from __future__ import annotations

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel


class FamilyRule(DataModel):
    models: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None

    @model_validator(mode="after")
    def _names_something(self) -> FamilyRule:
        if not self.models and not self.architectures:
            raise ValueError("a rule names models or architectures")
        return self


class ModelFamilies(DataModel):
    rule: tuple[FamilyRule, ...]
