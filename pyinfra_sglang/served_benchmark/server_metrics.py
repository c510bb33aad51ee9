"""SGLang's own view of a benchmark run: running and queued requests, KV-cache use, the
prefix cache's hits, generation throughput, retractions and the server's limits, polled from
its Prometheus endpoint (`/metrics`, served with --enable-metrics) while the benchmark runs.

The poll loop runs on the host beside the benchmark and writes ``metrics.txt``: a
``### poll <unix seconds>`` line per poll, then the lines of that poll's series (the names per
release: data/sglang_bench.toml ``[[server_metrics]]``). ``summarize_polls`` turns it into
``server_metrics.json``: the run's fullest queued moment (diagnosis/bottlenecks.py) and the
timeline the per-step server verdicts are cut from (diagnosis/server_side.py).
"""

from __future__ import annotations

import re
import shlex

from pyinfra_sglang import data
from pyinfra_sglang.versions import parse_version

METRICS_FILE = "metrics.txt"
POLL_MARK = "### poll"
# The two gauges every release's poll records: the run's summary is judged on them.
USAGE, QUEUED = "token_usage", "queued"
# Shares across ranks: the fullest rank's; counts and rates: summed over ranks.
SHARES = ("token_usage", "cache_hit_rate")
# Per-rank values that every rank repeats: one rank's.
PER_RANK = ("context_len", "max_total_num_tokens", "spec_accept_length")
_SERIES = re.compile(r"^(?P<name>sglang:[a-z_]+)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eE]+|NaN)\s*$")


def metric_names(sglang_version: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(gauges, counters): what the poller records for ``sglang_version``, each {key: the
    series' name}; the newest entry's for None (results read without the release)."""
    entries = data.sglang_bench().server_metrics
    if sglang_version is None:
        entry = entries[-1]
        return dict(entry.gauges), dict(entry.counters)
    version = parse_version(sglang_version)
    for entry in entries:
        if (entry.since is None or parse_version(entry.since) <= version) and (
            entry.until is None or version < parse_version(entry.until)
        ):
            return dict(entry.gauges), dict(entry.counters)
    raise ValueError(f"sglang_bench.toml names no /metrics series for SGLang {version}")


def poll_loop(
    metrics_url: str, output: str, sglang_version: str | None = None, interval_s: float = 1.0
) -> str:
    """Shell that polls ``metrics_url`` until killed (every request bounded to 2 s)."""
    gauges, counters = metric_names(sglang_version)
    names = sorted({*gauges.values(), *counters.values()})
    # "sglan[g]" matches the same lines, yet grep's own command line then does not contain
    # "sglang", so the GPU sampler does not count it as a server process.
    wanted = "|".join(re.escape(n).replace("sglang", "sglan[g]") for n in names)
    return (
        f'while :; do echo "{POLL_MARK} $(date +%s.%N)"; curl -s -m 2 '
        f"{shlex.quote(metrics_url)} | grep -E {shlex.quote(f'^({wanted})[{{ ]')}; "
        f"sleep {float(interval_s)}; done > {shlex.quote(output)} 2>/dev/null"
    )


def parse_polls(lines: list[str]) -> list[dict]:
    """Each poll as ``{"t": unix seconds or None, series name: [values, one per series]}``."""
    polls: list[dict] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(POLL_MARK):
            stamp = stripped[len(POLL_MARK) :].strip()
            try:
                when = float(stamp) if stamp else None
            except ValueError:
                when = None
            polls.append({"t": when})
            continue
        match = _SERIES.match(stripped)
        if match and polls and match["value"] != "NaN":
            polls[-1].setdefault(match["name"], []).append(float(match["value"]))
    return polls


def _reading(poll: dict, gauges: dict[str, str], counters: dict[str, str]) -> dict:
    reading: dict = {"t": poll["t"]}
    for key, name in {**gauges, **counters}.items():
        values = poll.get(name)
        if not values:
            continue
        if key in SHARES or key in PER_RANK:
            reading[key] = max(values)
        else:
            reading[key] = sum(values)
    return reading


def summarize_polls(lines: list[str], sglang_version: str | None = None) -> dict | None:
    """``{"kv_cache_usage", "queued_requests", "peak_kv_cache_usage", "peak_queued_requests",
    "polls", "timeline"}`` over the polls that answered (usage: the fullest rank's; queue:
    summed over ranks); None when no poll did (metrics off, or the endpoint unreachable).

    ``kv_cache_usage`` and ``queued_requests`` come from ONE poll, the fullest cache among
    the polls with requests waiting (else the fullest cache): "full while requests queued"
    must be true at one moment, not of two peaks at different times. ``timeline``: each
    answered poll's readings by key (data/sglang_bench.toml), with its time where the poll
    line carries one."""
    gauges, counters = metric_names(sglang_version)
    timeline = [
        reading
        for reading in (_reading(poll, gauges, counters) for poll in parse_polls(lines))
        if USAGE in reading and QUEUED in reading
    ]
    if not timeline:
        return None
    usage, queued = max(
        ((r[USAGE], int(r[QUEUED])) for r in timeline),
        key=lambda reading: (reading[1] > 0, reading[0]),
    )
    return {
        "kv_cache_usage": usage,
        "queued_requests": queued,
        "peak_kv_cache_usage": max(r[USAGE] for r in timeline),
        "peak_queued_requests": max(int(r[QUEUED]) for r in timeline),
        "polls": len(timeline),
        "timeline": timeline,
    }
