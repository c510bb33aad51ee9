"""SGLang's /metrics polled during a benchmark (checks/server_metrics.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pyinfra_sglang.served_benchmark.server_metrics import (
    POLL_MARK,
    metric_names,
    poll_loop,
    summarize_polls,
)

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"

# Two polls of a server with two scheduler ranks, as SGLang labels its series.
POLLS = f"""{POLL_MARK}
sglang:token_usage{{model_name="glm-5",tp_rank="0"}} 0.41
sglang:token_usage{{model_name="glm-5",tp_rank="1"}} 0.43
sglang:num_queue_reqs{{model_name="glm-5",tp_rank="0"}} 0.0
sglang:num_queue_reqs{{model_name="glm-5",tp_rank="1"}} 0.0
{POLL_MARK}
sglang:token_usage{{model_name="glm-5",tp_rank="0"}} 0.97
sglang:token_usage{{model_name="glm-5",tp_rank="1"}} 0.95
sglang:num_queue_reqs{{model_name="glm-5",tp_rank="0"}} 7.0
sglang:num_queue_reqs{{model_name="glm-5",tp_rank="1"}} 5.0
{POLL_MARK}
""".splitlines()


def test_peaks_over_the_polls_that_answered():
    summary = summarize_polls(POLLS)
    assert {k: v for k, v in summary.items() if k != "timeline"} == {
        "kv_cache_usage": 0.97,
        "queued_requests": 12,
        "peak_kv_cache_usage": 0.97,
        "peak_queued_requests": 12,
        "polls": 2,
    }
    # Ranks: the fullest rank's share, the queues summed; polls without a time (older
    # metrics.txt files) keep None.
    assert summary["timeline"] == [
        {"t": None, "queued": 0.0, "token_usage": 0.43},
        {"t": None, "queued": 12.0, "token_usage": 0.97},
    ]


def test_full_cache_and_queue_are_read_from_the_same_poll():
    # The cache was fullest when nothing waited; requests queued while it was half full.
    lines = [
        POLL_MARK,
        'sglang:token_usage{m="x"} 0.99',
        'sglang:num_queue_reqs{m="x"} 0.0',
        POLL_MARK,
        'sglang:token_usage{m="x"} 0.50',
        'sglang:num_queue_reqs{m="x"} 3.0',
    ]
    summary = summarize_polls(lines)
    assert (summary["kv_cache_usage"], summary["queued_requests"]) == (0.5, 3)
    assert (summary["peak_kv_cache_usage"], summary["peak_queued_requests"]) == (0.99, 3)


def test_no_answer_means_no_numbers():
    assert summarize_polls([POLL_MARK, POLL_MARK]) is None
    assert summarize_polls([]) is None
    # A poll with one gauge only (a partial read) does not count.
    assert summarize_polls([POLL_MARK, 'sglang:token_usage{model_name="m"} 0.5']) is None


def test_poll_loop_keeps_the_releases_series_with_each_polls_time(tmp_path):
    metrics = tmp_path / "metrics.prom"
    metrics.write_text(
        "# HELP sglang:token_usage The token usage.\n"
        'sglang:token_usage{model_name="m"} 0.25\n'
        'sglang:num_queue_reqs{model_name="m"} 3.0\n'
        'sglang:num_running_reqs{model_name="m"} 9.0\n'
        'sglang:token_usage_total{model_name="m"} 99.0\n'
        'sglang:time_to_first_token_seconds_sum{model_name="m"} 4.0\n'
    )
    output = tmp_path / "metrics.txt"
    loop = poll_loop(metrics.as_uri(), str(output), "0.5.17", interval_s=0.05)
    subprocess.run(["timeout", "1.5", "bash", "-c", loop], check=False)
    lines = output.read_text().splitlines()
    marks = [line for line in lines if line.startswith(POLL_MARK)]
    assert len(marks) >= 2
    assert all(float(mark.split()[-1]) > 1.7e9 for mark in marks)
    assert set(lines) - set(marks) == {
        'sglang:token_usage{model_name="m"} 0.25',
        'sglang:num_queue_reqs{model_name="m"} 3.0',
        'sglang:num_running_reqs{model_name="m"} 9.0',
    }
    summary = summarize_polls(lines, "0.5.17")
    assert (summary["kv_cache_usage"], summary["queued_requests"]) == (0.25, 3)
    assert summary["timeline"][0]["running"] == 9.0 and summary["timeline"][0]["t"] > 1.7e9
    # Before 0.5.17 the poller reads the two gauges it always read.
    older = poll_loop(metrics.as_uri(), str(output), "0.5.16")
    assert "num_running_reqs" not in older and "sglan[g]:token_usage" in older


def test_the_real_servers_metrics_give_every_series_the_poller_reads():
    # Real SGLang 0.5.17's /metrics (tests/fixtures/sglang-0.5.17-h200/tiny): one poll of it.
    text = (REAL / "tiny" / "metrics-no-key.txt").read_text().splitlines()
    summary = summarize_polls([f"{POLL_MARK} 1764600000.0", *text], "0.5.17")
    [reading] = summary["timeline"]
    gauges, counters = metric_names("0.5.23")
    assert (gauges, counters) == metric_names("0.5.17")
    missing = set(gauges) | set(counters)
    missing -= set(reading)
    # Counters appear once something counted them: the tiny run cached and retracted nothing.
    assert missing == {"cached_tokens", "retracted_requests"}
    assert reading["context_len"] == 4096.0 and reading["prompt_tokens"] > 0
