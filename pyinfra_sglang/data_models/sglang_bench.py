"""The model of pyinfra_sglang/data/sglang_bench.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number, Release


class BenchModule(DataModel):
    name: str
    since: Release | None = None
    until: Release | None = None


class BenchRun(DataModel):
    backend: str
    dataset: str
    range_ratio: Number
    min_prompts: int
    timeout_s: Number
    sample_interval_s: Number


class ServerMetricNames(DataModel):
    """The /metrics series the poller records, per release range (names as the wheels
    declare them)."""

    since: Release | None = None
    until: Release | None = None
    gauges: dict[str, str]
    counters: dict[str, str] = {}


class SglangBench(DataModel):
    module: tuple[BenchModule, ...]
    run: BenchRun
    server_metrics: tuple[ServerMetricNames, ...]
