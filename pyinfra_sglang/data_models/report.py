"""The model of pyinfra_sglang/data/report.toml."""

from __future__ import annotations

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel, Number


class ReportSteps(DataModel):
    max_labels: int


class PanelSeries(DataModel):
    label: str
    scale: Number
    field: str | None = None
    counter: str | None = None

    @model_validator(mode="after")
    def _field_or_counter(self) -> PanelSeries:
        if (self.field is None) == (self.counter is None):
            raise ValueError("a series reads one field or one counter")
        return self


class PanelLimit(DataModel):
    field: str
    label: str


class Panel(DataModel):
    title: str
    unit: str
    series: tuple[PanelSeries, ...]
    top: Number | None = None
    min_top: Number | None = None
    capacity: str | None = None
    limit: PanelLimit | None = None


class Report(DataModel):
    steps: ReportSteps
    panel: tuple[Panel, ...]
