"""SGLang's own view of a benchmark run: KV-cache use and queued requests, polled from its
Prometheus endpoint (`/metrics`, served with --enable-metrics) while the benchmark runs.

The poll loop runs on the host beside the benchmark and writes ``metrics.txt``: a ``### poll``
line per poll, then the gauge lines of that poll. ``summarize_polls`` turns it into
``server_metrics.json`` for diagnosis/diagnose.py.
"""

from __future__ import annotations

import re
import shlex

METRICS_FILE = "metrics.txt"
POLL_MARK = "### poll"
# sglang:token_usage: share of the KV cache's tokens in use; sglang:num_queue_reqs: requests
# waiting for room. With several scheduler ranks each reports its own series.
GAUGES = ("sglang:token_usage", "sglang:num_queue_reqs")
_SERIES = re.compile(r"^(?P<name>sglang:[a-z_]+)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eE]+|NaN)\s*$")


def poll_loop(metrics_url: str, output: str, interval_s: float = 1.0) -> str:
    """Shell that polls ``metrics_url`` until killed (every request bounded to 2 s)."""
    # "sglan[g]" matches the same lines, yet grep's own command line then does not contain
    # "sglang", so the GPU sampler does not count it as a server process.
    wanted = "|".join(re.escape(g).replace("sglang", "sglan[g]") for g in GAUGES)
    return (
        f"while :; do echo '{POLL_MARK}'; curl -s -m 2 {shlex.quote(metrics_url)} "
        f"| grep -E {shlex.quote(f'^({wanted})[{{ ]')}; sleep {float(interval_s)}; "
        f"done > {shlex.quote(output)} 2>/dev/null"
    )


def summarize_polls(lines: list[str]) -> dict | None:
    """``{"kv_cache_usage", "queued_requests", "peak_kv_cache_usage", "peak_queued_requests",
    "polls"}`` over the polls that answered (usage: the fullest rank's; queue: summed over
    ranks); None when no poll did (metrics off, or the endpoint unreachable).

    ``kv_cache_usage`` and ``queued_requests`` come from ONE poll, the fullest cache among
    the polls with requests waiting (else the fullest cache): "full while requests queued"
    must be true at one moment, not of two peaks at different times."""
    polls: list[dict[str, list[float]]] = []
    for line in lines:
        if line.strip() == POLL_MARK:
            polls.append({})
            continue
        match = _SERIES.match(line.strip())
        if match and polls and match["name"] in GAUGES and match["value"] != "NaN":
            polls[-1].setdefault(match["name"], []).append(float(match["value"]))
    readings = [
        (max(poll["sglang:token_usage"]), int(sum(poll["sglang:num_queue_reqs"])))
        for poll in polls
        if all(g in poll for g in GAUGES)
    ]
    if not readings:
        return None
    usage, queued = max(readings, key=lambda reading: (reading[1] > 0, reading[0]))
    return {
        "kv_cache_usage": usage,
        "queued_requests": queued,
        "peak_kv_cache_usage": max(u for u, _ in readings),
        "peak_queued_requests": max(q for _, q in readings),
        "polls": len(readings),
    }
