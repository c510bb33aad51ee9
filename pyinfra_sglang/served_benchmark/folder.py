"""The results folder of one benchmark run (``<bench_results_dir>/<host>/<UTC timestamp>/``):
the one owner of its file names. deploy/bench.py writes them (checks/served_benchmark.py,
the script of settings.py on the host); diagnose, report, ab-compare and the tuner read them.
"""

from __future__ import annotations

# Written on the host by the benchmark's script, fetched by name.
BENCH_FILE = "bench.jsonl"  # bench_serving's result lines, one per call
SAMPLES_FILE = "samples.jsonl"  # the GPU sampler's readings
# The sampler's output of earlier releases, one JSON document: still read.
SAMPLES_FILE_BEFORE = "samples.json"
LOG_FILE = "bench.log"
SAMPLER_LOG_FILE = "sampler.log"
# One line per finished benchmark call, its Unix start and end on the host's clock (the
# sampler's ``time``): bench_serving's own lines carry no time, and the report marks each
# concurrency's span on the GPU timelines with these.
STEPS_FILE = "steps.jsonl"
METRICS_FILE = "metrics.txt"  # the server's /metrics, polled while the benchmark runs

# Written on the controller beside them.
SETTINGS_FILE = "settings.json"  # the settings measured and their hash
SERVER_METRICS_FILE = "server_metrics.json"  # the polls summarized (server_metrics.py)
LINKS_FILE = "links.json"  # the GPUs' PCIe links and the host's virtualization
PROFILE_FILE = "profile.json"  # the profile as the server ran it, with its roofline
