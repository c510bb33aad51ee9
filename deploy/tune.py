"""Tune: `pyinfra -y INVENTORY deploy/tune.py [--data tune_settings='["cuda_graph"]']`.

Per host (all in parallel): search the serving settings of data/tuning.toml one at a time
against the best so far, each trial served with deploy/site.py's health wait and rollback and
measured with deploy/bench.py's benchmark (bench_repeat runs a trial, at least 2), judged
against the run-to-run spread; a close call gets more rounds, a failed start is recorded and
the search goes on. Bounded by tune_budget_s, resumable (run it again), and the host is left on
the winner (tune_keep). Prints a table of every trial and the winner as a ready
sglang_profile_overrides line; writes tune.txt, tune.jsonl and tune.html under
bench_results_dir/<host>/tune-<search>/. Ends with one line a host.
"""

from pyinfra import host, state

from checks.run_summary import run_summary
from pyinfra_sglang.inventory import host_config
from roles.tuner import refuse_unsupported, tune_host

run_summary(state)
config = host_config(host)
refuse_unsupported(config, host.name)  # before any change on any host
tune_host(
    name="Tune the SGLang server's settings", config=config, results_dir=config.bench_results_dir
)
