"""The server's side of each benchmark step (pyinfra_sglang/diagnosis/server_side.py): the
verdicts from SGLang's own numbers, judged on timelines shaped as the poller records them
(series names of real SGLang 0.5.17: data/sglang_bench.toml)."""

from __future__ import annotations

from pyinfra_sglang.diagnosis.server_side import (
    ServerLimits,
    binding_limit,
    judge_step,
    prefill_floor_ms,
    prefill_spec,
    scaling_table,
    server_limits,
)

CAPPED = ServerLimits(max_running_requests=2, max_total_num_tokens=903_443)


def poll(t, running, queued, usage, prompt=0.0, cached=None, retracted=None):
    reading = {"t": t, "running": running, "queued": queued, "token_usage": usage}
    reading["prompt_tokens"] = prompt
    if cached is not None:
        reading["cached_tokens"] = cached
    if retracted is not None:
        reading["retracted_requests"] = retracted
    return reading


def test_a_queue_behind_max_running_requests_with_room_in_the_cache_is_admission_capped():
    timeline = [poll(t, 2, 30 - t, 0.01, prompt=100.0 * t) for t in range(10)]
    step = judge_step("c=32", 32, (0.5, 9.5), timeline, {}, CAPPED, None)
    [finding] = step.findings
    assert finding.code == "admission-capped"
    assert finding.message.startswith(
        "c=32: up to 29 requests queued while 2 ran, the server's max_running_requests, with "
        "the KV cache at 1%"
    )
    assert "Raise max_running_requests (now 2)" in finding.message
    # Below the cap, a queue is no cap binding.
    below = [poll(t, 1, 3, 0.01) for t in range(10)]
    assert judge_step("c=4", 4, (0, 9), below, {}, CAPPED, None).findings == ()


def test_a_full_cache_with_a_queue_or_retractions_is_kv_capacity_bound():
    limits = ServerLimits(max_running_requests=4096, max_total_num_tokens=101_830)
    timeline = [poll(t, 20, 42, 0.99 if t > 3 else 0.5, retracted=float(t)) for t in range(8)]
    step = judge_step("c=64", 64, (1, 7), timeline, {}, limits, None)
    [finding] = step.findings
    assert finding.code == "kv-capacity-bound"
    assert finding.message.startswith(
        "c=64: the KV cache of 101,830 tokens ran 99% full with up to 42 requests queued and "
        "6 retracted"
    )
    assert step.retracted == 6.0 and step.full_polls == 4


def test_prompt_tokens_from_the_prefix_cache_are_flagged_and_fresh_ones_are_not():
    cached = [poll(t, 8, 0, 0.2, prompt=6000.0 * t, cached=4400.0 * t) for t in range(6)]
    step = judge_step("c=8", 8, (0, 5), cached, {}, CAPPED, None)
    assert [f.code for f in step.findings] == ["prefix-cached"]
    assert round(step.cached_share, 3) == 0.733
    # No cached_tokens series at all: SGLang shows the counter once it counted something.
    fresh = [poll(t, 8, 0, 0.2, prompt=6000.0 * t) for t in range(6)]
    assert judge_step("c=8", 8, (0, 5), fresh, {}, CAPPED, None).cached_share == 0.0


def test_a_ttft_below_the_prefill_roofline_was_no_prefill():
    # 8B active parameters, 6000-token prompts on one H200 at 989.5 dense TFLOP/s: 97 ms.
    prefill = prefill_spec({"active_params_b": 8.0, "gpu": "NVIDIA H200", "tp_size": 1})
    row = {"completed": 8, "total_input_tokens": 48_000, "median_ttft_ms": 50.0}
    assert round(prefill_floor_ms(row, prefill), 1) == 97.0
    step = judge_step("c=1", 1, (0, 1), [], row, CAPPED, prefill)
    assert [f.code for f in step.findings] == ["prefill-faster-than-compute"]
    assert (
        judge_step("c=1", 1, (0, 1), [], {**row, "median_ttft_ms": 130.0}, CAPPED, prefill).findings
        == ()
    )
    # No dense rate in the GPU table: no floor, nothing judged.
    assert prefill_spec({"active_params_b": 8.0, "gpu": "NVIDIA L40S", "tp_size": 1}) is None


def test_the_limits_come_from_server_info_and_the_metrics():
    info = {
        "max_running_requests": None,
        "max_total_num_tokens": 903_443,
        "chunked_prefill_size": 8192,
        "context_length": None,
        "internal_states": [{"effective_max_running_requests_per_dp": 4096}],
    }
    server = {"timeline": [{"t": 1.0, "context_len": 8192.0}]}
    assert server_limits([{"server_info": info}], server) == ServerLimits(4096, 903_443, 8192, 8192)


def test_the_scaling_table_says_where_throughput_stops_and_what_binds_there():
    rows = {1: 196.5, 8: 393.0, 32: 393.6}
    table = scaling_table(
        [
            {
                "concurrency": c,
                "rows": [{"max_concurrency": c, "output_throughput": t, "mean_tpot_ms": 5.0}],
                "verdict": "memory-bandwidth-bound",
                "server": ["admission-capped"] if c > 1 else [],
            }
            for c, t in rows.items()
        ]
    )
    assert [(r["concurrency"], r["grows"]) for r in table] == [(1, True), (8, True), (32, False)]
    assert round(table[1]["growth"], 2) == 1.0
    assert binding_limit(table) == "admission-capped from c=8 (+100% over the one before)"
    grew = [{**r, "server_verdicts": [], "grows": True} for r in table]
    assert binding_limit(grew) == "throughput grew at every concurrency up to c=32"
