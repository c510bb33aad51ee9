"""A/B benchmark: `pyinfra -y INVENTORY deploy/ab.py --data 'bench_ab_overrides={...}'`.

Per host (all in parallel): benchmark what the host serves (A), serve it again with
`bench_ab_overrides` laid over the profile (B, started with the health wait and rollback of
deploy/site.py), benchmark B, serve A again, then compare: per concurrency the difference of
mean output throughput against each side's run-to-run spread (`bench_repeat` runs a side),
called noise or real. The host ends where it began, on A's configuration, also when B's
benchmark fails. Ends with one line a host.
"""

from datetime import UTC, datetime

from pyinfra import host, state
from pyinfra.api.exceptions import PyinfraError

from checks.run_summary import run_summary
from checks.served_benchmark import ab_report, bench_host
from pyinfra_sglang.inventory import ab_side_b, host_config
from pyinfra_sglang.served_benchmark.results import TIMESTAMP
from roles.sglang_service import sglang_service

run_summary(state)
config = host_config(host)
if not config.bench_ab_overrides:
    raise PyinfraError(
        f"host {host.name}: bench_ab_overrides is empty, so side B would be side A; "
        "allowed: profile fields, e.g. --data 'bench_ab_overrides={\"cuda_graph\": false}'"
    )
if config.bench_repeat < 2:
    raise PyinfraError(
        f"host {host.name}: bench_repeat = {config.bench_repeat}: one run a side shows no spread, "
        "so noise cannot be told from a real difference; "
        "allowed: 2..100 (e.g. --data bench_repeat=3)"
    )
config_b = ab_side_b(config)
if config_b.sglang_profile_overrides == config.sglang_profile_overrides:
    raise PyinfraError(
        f"host {host.name}: bench_ab_overrides = {config.bench_ab_overrides} changes nothing "
        "(sglang_profile_overrides already holds it); allowed: a profile setting that differs"
    )
results = config.bench_results_dir
# Run folders are named by their UTC start: the comparison takes only this A/B's runs.
since = datetime.now(UTC).strftime(TIMESTAMP)

bench_host(
    name="A/B: benchmark side A (as deployed)",
    config=config,
    results_dir=results,
    compare_previous=False,
)
sglang_service(name=f"A/B: serve side B ({config.bench_ab_overrides})", config=config_b)
# Whatever B's benchmark does, A is served again after it.
bench_host(
    name="A/B: benchmark side B",
    config=config_b,
    results_dir=results,
    compare_previous=False,
    _ignore_errors=True,
)
sglang_service(name="A/B: serve side A again", config=config)
ab_report(name="A/B: compare", config_a=config, config_b=config_b, results_dir=results, since=since)
