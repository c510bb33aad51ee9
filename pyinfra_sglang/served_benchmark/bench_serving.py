"""SGLang's serving benchmark per release (data/sglang_bench.toml): which module runs it and
with which fixed settings."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.data_models import BenchRun
from pyinfra_sglang.versions import parse_version


def bench_module(sglang_version: str) -> str:
    """The module ``python -m`` runs for SGLang ``sglang_version``'s serving benchmark;
    ValueError for a release the data names no module for."""
    version = parse_version(sglang_version)
    found = [
        entry.name
        for entry in data.sglang_bench().module
        if (entry.since is None or parse_version(entry.since) <= version)
        and (entry.until is None or version < parse_version(entry.until))
    ]
    if len(found) != 1:
        raise ValueError(
            f"sglang_bench.toml names {len(found)} benchmark modules for SGLang {version}"
        )
    return found[0]


def run_settings() -> BenchRun:
    """The benchmark's fixed settings (backend, dataset, range ratio, bounds)."""
    return data.sglang_bench().run
