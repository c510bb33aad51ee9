"""Release boundaries of the stand-in, copied by hand from pyinfra_sglang/data/sglang_bench.toml
(this package runs on a test host, without the project; a unit test compares them)."""

from __future__ import annotations

from sglang._standin.args import parse_version

# The serving benchmark moved from sglang.bench_serving to sglang.benchmark.serving.
BENCH_MOVED = "0.5.15"


def at_least(version: str, boundary: str) -> bool:
    return parse_version(version) >= parse_version(boundary)
