"""The server's side of real SGLang 0.5.17 runs (tests/fixtures/sglang-0.5.17-h200, the
2026-12-03 section of its README): a capped server and a full KV cache, which the GPU
verdicts alone call memory-bandwidth- and compute-bound, are named by what binds; a run on
fresh prompts measures prefill, not the prefix cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results
from pyinfra_sglang.served_benchmark.server_metrics import summarize_polls

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"


def diagnosed(name: str, tmp_path: Path) -> dict:
    """The run's folder as deploy/bench.py leaves it: server_metrics.json from metrics.txt."""
    folder = tmp_path / name
    shutil.copytree(REAL / name, folder)
    polled = summarize_polls((folder / "metrics.txt").read_text().splitlines(), "0.5.17")
    (folder / "server_metrics.json").write_text(json.dumps(polled))
    return diagnose_results(load_results(folder))


def codes(report: dict) -> list[tuple[str, str]]:
    return [(f.code, f.message.split(":")[0]) for f in report["findings"]]


def test_a_server_capped_at_two_running_requests_is_admission_capped(tmp_path):
    report = diagnosed("capped", tmp_path)
    # The GPUs alone: memory-bandwidth-bound everywhere, as the issue found.
    assert report["steps"]["run_text"] == "memory-bandwidth-bound at every concurrency"
    server = report["server"]
    assert server["limits"]["max_running_requests"] == 2
    assert [(r["concurrency"], round(r["output_throughput"])) for r in server["scaling"]] == [
        (1, 193),
        (8, 382),
        (32, 383),
    ]
    assert server["headline"] == "admission-capped from c=8 (+98% over the one before)"
    capped = [f for f in report["findings"] if f.code == "admission-capped"]
    assert [f.message.split(":")[0] for f in capped] == ["c=8", "c=32"]
    assert capped[1].evidence["queued"] == 30 and capped[1].evidence["max_running_requests"] == 2
    assert "Raise max_running_requests (now 2)" in capped[1].message
    assert "binds first: admission-capped from c=8" in format_report(report)


def test_a_starved_kv_cache_is_kv_capacity_bound(tmp_path):
    report = diagnosed("kv-starved", tmp_path)
    assert report["steps"]["run_text"] == "memory-bandwidth-bound at c=8; compute-bound at c=64"
    server = report["server"]
    assert server["limits"]["max_total_num_tokens"] == 101_830
    [kv] = [f for f in report["findings"] if f.code == "kv-capacity-bound"]
    assert kv.message.startswith("c=64: the KV cache of 101,830 tokens ran 99% full")
    assert kv.evidence["queued"] == 42 and kv.evidence["retracted"] == 4
    assert server["headline"] == "kv-capacity-bound from c=64 (+44% over the one before)"
    # The whole-run memory-capacity finding gives way to the per-step verdict.
    assert "memory-capacity-bound" not in [f.code for f in report["findings"]]


def test_fresh_prompts_measure_prefill_not_the_prefix_cache(tmp_path):
    steps = [json.loads(line) for line in (REAL / "long-prompt-fresh/steps.jsonl").open()]
    assert len({s["seed"] for s in steps}) == len(steps) == 5  # the warm-up and 4 steps
    report = diagnosed("long-prompt-fresh", tmp_path)
    measured = report["server"]["steps"]
    assert [s["step"] for s in measured] == ["c=1 #1", "c=8 #1", "c=1 #2", "c=8 #2"]
    assert all(s["cached_share"] < 0.05 for s in measured)
    assert all(s["prompt_tokens"] > 50_000 for s in measured)
    c1 = measured[0]
    # 8B active parameters x 2 FLOP x 6,000 prompt tokens at 989.5 dense TFLOP/s: 97 ms; the
    # real TTFT is above it (prefill computed), not 50 ms as when the prompts were cached.
    assert c1["prefill_floor_ms"] == pytest.approx(97, abs=1)
    assert c1["median_ttft_ms"] > c1["prefill_floor_ms"]
    assert not {"prefix-cached", "prefill-faster-than-compute"} & {
        f.code for f in report["findings"]
    }


def test_the_warm_up_request_of_each_call_was_a_cache_hit_before(tmp_path):
    # capped/ ran with the module's own per-call warm-up request: its first prompt twice.
    server = diagnosed("capped", tmp_path)["server"]
    assert server["steps"][0]["cached_share"] == pytest.approx(0.127, abs=0.005)
    log = (REAL / "capped/server.log").read_text()
    assert "#new-token: 1, #cached-token: 519" in log


def test_the_report_page_shows_the_servers_side_under_the_gpu_charts(tmp_path):
    from pyinfra_sglang.report.page import read_run, write_report

    diagnosed("capped", tmp_path)  # leaves server_metrics.json beside the run
    page = write_report(read_run(tmp_path / "capped"), tmp_path / "report").read_text()
    side = page[page.index("<h2>The server's side</h2>") :]
    assert page.index("<h2>GPU timelines</h2>") < page.index("<h2>The server's side</h2>")
    assert "<td>32</td><td>383</td><td>+0%</td>" in side
    assert "<code>admission-capped</code>" in side
    assert "Binds first: admission-capped from c=8 (+98% over the one before)." in side
    assert "max_running_requests 2" in side
    png = (tmp_path / "report" / "server-timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG") and '"server-timeline.png"' in side
