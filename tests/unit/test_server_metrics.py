"""SGLang's /metrics polled during a benchmark (checks/server_metrics.py)."""

from __future__ import annotations

import subprocess

from pyinfra_sglang.served_benchmark.server_metrics import POLL_MARK, poll_loop, summarize_polls

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
    assert summarize_polls(POLLS) == {
        "kv_cache_usage": 0.97,
        "queued_requests": 12,
        "peak_kv_cache_usage": 0.97,
        "peak_queued_requests": 12,
        "polls": 2,
    }


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


def test_poll_loop_keeps_only_the_two_gauges(tmp_path):
    metrics = tmp_path / "metrics.prom"
    metrics.write_text(
        "# HELP sglang:token_usage The token usage.\n"
        'sglang:token_usage{model_name="m"} 0.25\n'
        'sglang:num_queue_reqs{model_name="m"} 3.0\n'
        'sglang:num_running_reqs{model_name="m"} 9.0\n'
        'sglang:token_usage_total{model_name="m"} 99.0\n'
    )
    output = tmp_path / "metrics.txt"
    loop = poll_loop(metrics.as_uri(), str(output), interval_s=0.05)
    subprocess.run(["timeout", "0.5", "bash", "-c", loop], check=False)
    lines = output.read_text().splitlines()
    assert lines.count(POLL_MARK) >= 2
    assert set(lines) == {
        POLL_MARK,
        'sglang:token_usage{model_name="m"} 0.25',
        'sglang:num_queue_reqs{model_name="m"} 3.0',
    }
    summary = summarize_polls(lines)
    assert (summary["kv_cache_usage"], summary["queued_requests"]) == (0.25, 3) and summary[
        "polls"
    ] >= 1
