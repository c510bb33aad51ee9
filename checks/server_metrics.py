"""SGLang's own view of a benchmark run: KV-cache use and queued requests, polled from its
Prometheus endpoint (`/metrics`, served with --enable-metrics) while the benchmark runs.

The poll loop runs on the host beside the benchmark and writes ``metrics.txt``: a ``### poll``
line per poll, then the gauge lines of that poll. ``summarize_polls`` turns it into
``server_metrics.json`` for checks/diagnose.py.
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
    wanted = "|".join(re.escape(g) for g in GAUGES)
    return (
        f"while :; do echo '{POLL_MARK}'; curl -s -m 2 {shlex.quote(metrics_url)} "
        f"| grep -E {shlex.quote(f'^({wanted})[{{ ]')}; sleep {interval_s}; done > {shlex.quote(output)} 2>/dev/null"
    )


def summarize_polls(lines: list[str]) -> dict | None:
    """``{"kv_cache_usage": peak, "queued_requests": peak, "polls": n}`` over the polls that
    answered (usage: the fullest rank's; queue: summed over ranks); None when no poll did
    (metrics off, or the endpoint unreachable)."""
    polls: list[dict[str, list[float]]] = []
    for line in lines:
        if line.strip() == POLL_MARK:
            polls.append({})
            continue
        match = _SERIES.match(line.strip())
        if match and polls and match["name"] in GAUGES and match["value"] != "NaN":
            polls[-1].setdefault(match["name"], []).append(float(match["value"]))
    answered = [poll for poll in polls if all(g in poll for g in GAUGES)]
    if not answered:
        return None
    return {
        "kv_cache_usage": max(max(poll["sglang:token_usage"]) for poll in answered),
        "queued_requests": int(max(sum(poll["sglang:num_queue_reqs"]) for poll in answered)),
        "polls": len(answered),
    }
