"""SGLang's own view of a benchmark run: running and queued requests, KV-cache use, the
prefix cache's hits, generation throughput, retractions and the server's limits, polled from
its Prometheus endpoint (`/metrics`, served with --enable-metrics) while the benchmark runs.

The poll loop runs on the host beside the benchmark and writes ``metrics.txt``: a
``### poll <unix seconds>`` line per poll, then the lines of that poll's series (the names per
release: data/sglang_bench.toml ``[[server_metrics]]``). ``summarize_polls`` turns it into
``server_metrics.json``: the run's fullest queued moment (diagnosis/bottlenecks.py) and the
timeline the per-step server verdicts are cut from (diagnosis/server_side.py).

Both are read within bounds: every value a number from 0 to MAX_VALUE (shares to 1), poll times
finite and increasing. In metrics.txt a value or a poll out of them is dropped with a warning;
a server_metrics.json out of them (it was written from checked polls) is refused by
check_server_metrics, naming the file and the field, and the diagnosis then says it could
not read the server side rather than judge on it.
"""

from __future__ import annotations

import re
import shlex

from pyinfra import logger

from pyinfra_sglang import data
from pyinfra_sglang.served_benchmark.folder import METRICS_FILE, SERVER_METRICS_FILE
from pyinfra_sglang.terminal import brief
from pyinfra_sglang.versions import parse_version

POLL_MARK = "### poll"
# The two gauges every release's poll records: the run's summary is judged on them.
USAGE, QUEUED = "token_usage", "queued"
# Shares across ranks: the fullest rank's; counts and rates: summed over ranks.
SHARES = ("token_usage", "cache_hit_rate")
# Per-rank values that every rank repeats: one rank's.
PER_RANK = ("context_len", "max_total_num_tokens", "spec_accept_length")
_SERIES = re.compile(
    r"^(?P<name>sglang:[a-z_]+)(?:\{[^}]*\})?\s+(?P<value>[-+0-9.eE]+|NaN|[-+]?Inf)\s*$"
)
# Every reading is a count, a total, a rate or a share: none is negative, none comes near this
# (a counter of tokens at 1e15 is 30 years at a million tokens a second); Unix seconds neither.
MAX_VALUE = 1e15
# The summary's numbers (the shares among them bounded by 1).
SUMMARY_NUMBERS = (
    "kv_cache_usage",
    "queued_requests",
    "peak_kv_cache_usage",
    "peak_queued_requests",
    "polls",
)
SUMMARY_SHARES = ("kv_cache_usage", "peak_kv_cache_usage")


class ServerMetricsError(ValueError):
    """A server_metrics.json that cannot be read: the file and the field named."""


def out_of_bounds(key: str, value: object) -> str | None:
    """Why ``value`` is no reading of ``key`` (a poll's time, a share, a count or a rate),
    or None when it is one: a finite number (no bool) from 0 to MAX_VALUE, a share to 1.
    Huge ints are compared exactly, never converted; NaN fails every comparison."""
    top = 1.0 if key in SHARES or key in SUMMARY_SHARES else MAX_VALUE
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top:
        return None
    return f"{key} is {brief(value)}, not a number from 0 to {top:g}"


def check_server_metrics(server: object, where: str = SERVER_METRICS_FILE) -> dict:
    """``server`` (server_metrics.json as read) when it holds what summarize_polls writes:
    an object whose summary numbers and every timeline reading are within out_of_bounds, its
    readings objects with increasing times (a reading without a time, as older files have,
    is let be). ServerMetricsError ``<where>: <field> ...`` for the first that is not."""
    if not isinstance(server, dict):
        raise ServerMetricsError(f"{where}: is {brief(server)}, not a JSON object")
    for key in SUMMARY_NUMBERS:
        if server.get(key) is not None and (why := out_of_bounds(key, server[key])):
            raise ServerMetricsError(f"{where}: {why}")
    timeline = server.get("timeline")
    if timeline is None:
        return server
    if not isinstance(timeline, list):
        raise ServerMetricsError(f"{where}: timeline is {brief(timeline)}, not a list")
    last = None
    for position, reading in enumerate(timeline):
        at = f"{where}: timeline[{position}]"
        if not isinstance(reading, dict):
            raise ServerMetricsError(f"{at} is {brief(reading)}, not a JSON object")
        for key, value in reading.items():
            if key == "t" and value is None:
                continue
            if why := out_of_bounds(key, value):
                raise ServerMetricsError(f"{at}: {why}")
        when = reading.get("t")
        if when is not None:
            if last is not None and when <= last:
                raise ServerMetricsError(
                    f"{at}: t is {brief(when)}, not after the reading before ({brief(last)})"
                )
            last = when
    return server


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


# Drops named in the log, one line each; the rest are counted.
_LOGGED_DROPS = 5


def parse_polls(lines: list[str], dropped: list[str] | None = None) -> list[dict]:
    """Each poll as ``{"t": unix seconds or None, series name: [values, one per series]}``.
    A poll whose time is no number from 0 to MAX_VALUE after the poll before is dropped
    with its lines (a poll line without a time, as older files have, is kept with None); a
    value that is no number from 0 to MAX_VALUE is dropped (NaN, which SGLang reports for a
    gauge not yet measured, quietly). Each drop is added to ``dropped``, saying why."""
    dropped = [] if dropped is None else dropped
    polls: list[dict] = []
    last = None
    dropping = False  # the lines of a dropped poll
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith(POLL_MARK):
            stamp = stripped[len(POLL_MARK) :].strip()
            try:
                when = float(stamp) if stamp else None
                dropping = when is not None and (
                    out_of_bounds("t", when) is not None or (last is not None and when <= last)
                )
            except ValueError:
                dropping = True
            if dropping:
                after = f" after {last!r}" if last is not None else ""
                dropped.append(
                    f"line {number}: poll time {stamp[:40]!r} is no time from 0 to "
                    f"{MAX_VALUE:g}{after}: the poll is dropped",
                )
                continue
            last = when if when is not None else last
            polls.append({"t": when})
            continue
        match = _SERIES.match(stripped)
        if not match or not polls or dropping or match["value"] == "NaN":
            continue
        try:
            value = float(match["value"])
        except ValueError:
            value = None
        if value is None or not 0 <= value <= MAX_VALUE:
            dropped.append(
                f"line {number}: {match['name']} {match['value'][:40]!r} is no number from 0 "
                f"to {MAX_VALUE:g}: dropped",
            )
            continue
        polls[-1].setdefault(match["name"], []).append(value)
    return polls


def _reading(
    poll: dict, gauges: dict[str, str], counters: dict[str, str], dropped: list[str]
) -> dict:
    reading: dict = {"t": poll["t"]}
    for key, name in {**gauges, **counters}.items():
        values = poll.get(name)
        if not values:
            continue
        value = max(values) if key in SHARES or key in PER_RANK else sum(values)
        why = out_of_bounds(key, value)
        if why:
            dropped.append(f"the poll at {poll['t']!r}: {why}: dropped")
            continue
        reading[key] = value
    return reading


def summarize_polls(
    lines: list[str], sglang_version: str | None = None, warnings: list[str] | None = None
) -> dict | None:
    """``{"kv_cache_usage", "queued_requests", "peak_kv_cache_usage", "peak_queued_requests",
    "polls", "timeline"}`` over the polls that answered (usage: the fullest rank's; queue:
    summed over ranks); None when no poll did (metrics off, or the endpoint unreachable).

    ``kv_cache_usage`` and ``queued_requests`` come from ONE poll, the fullest cache among
    the polls with requests waiting (else the fullest cache): "full while requests queued"
    must be true at one moment, not of two peaks at different times. ``timeline``: each
    answered poll's readings by key (data/sglang_bench.toml), with its time where the poll
    line carries one. Values and polls out of bounds are dropped (parse_polls; a value
    summed over ranks past its bound too), the drops logged as a warning and added to
    ``warnings``: what it returns passes check_server_metrics."""
    gauges, counters = metric_names(sglang_version)
    dropped: list[str] = []
    readings = [_reading(poll, gauges, counters, dropped) for poll in parse_polls(lines, dropped)]
    timeline = [r for r in readings if USAGE in r and QUEUED in r]
    if dropped:
        more = len(dropped) - _LOGGED_DROPS
        logger.warning(
            f"{METRICS_FILE}: {len(dropped)} value(s) or poll(s) dropped: "
            + "; ".join(dropped[:_LOGGED_DROPS])
            + (f"; and {more} more" if more > 0 else "")
        )
        if warnings is not None:
            warnings.extend(dropped)
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
