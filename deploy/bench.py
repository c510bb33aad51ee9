"""Benchmark: `pyinfra -y INVENTORY deploy/bench.py`. On every host in parallel, runs SGLang's
bench_serving against the host's own server with the GPU sampler alongside, writes
`<bench_results_dir>/<host>/<UTC timestamp>/`, compares it with the last run of the same
settings, prints the bottleneck diagnosis, changes nothing, and exits non-zero when a benchmark
fails or output throughput dropped beyond `bench_regression_pct`. Ends with one line a
host."""

from pyinfra import host, state

from checks.run_summary import run_summary
from checks.served_benchmark import bench_host
from pyinfra_sglang.inventory import host_config

run_summary(state)
config = host_config(host)
bench_host(
    name="Benchmark the SGLang server and diagnose its bottleneck",
    config=config,
    results_dir=config.bench_results_dir,
)
