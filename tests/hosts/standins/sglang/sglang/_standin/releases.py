"""Release boundaries of the stand-in, copied by hand from pyinfra_sglang/data/sglang_bench.toml
and sglang_service.toml [multinode] (this package runs on a test host, without the project;
unit tests compare them)."""

from __future__ import annotations

from sglang._standin.args import parse_version

# The serving benchmark moved from sglang.bench_serving to sglang.benchmark.serving.
BENCH_MOVED = "0.5.15"
# Non-zero ranks of a multi-node group ignore SIGTERM and wait for rank 0's shutdown broadcast.
NONZERO_RANK_WAITS_FOR_RANK0 = "0.5.21"


def at_least(version: str, boundary: str) -> bool:
    return parse_version(version) >= parse_version(boundary)
