"""What real SGLang 0.5.17 on an H200 did (tests/fixtures/sglang-0.5.17-h200, made by
bench/real_engine.py), read by the project's own code: the diagnosis per step tells CUDA graphs
on (memory-bandwidth-bound) from off (host-bound), the bench driver keeps start-up out of the
steps, the A/B calls graphs a real gain, the decode client reads the real SSE streams, the
benchmark's real lines lose the API key they carry, and the stand-in answers as the real
server did."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.diagnosis.ab_compare import compare, runs_by_concurrency
from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results
from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.host_programs import decode_client as decode
from pyinfra_sglang.served_benchmark.results import scrub_secrets

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"
GRAPHS_ON, GRAPHS_OFF = REAL / "graphs-on", REAL / "graphs-off"
ONE_PROCESS_PER_STEP = REAL / "graphs-on-one-process-per-step"
TINY = REAL / "tiny"


def steps_report(folder: Path) -> dict:
    return diagnose_results(load_results(folder))["steps"]


def test_graphs_on_decode_is_memory_bandwidth_bound_at_every_step():
    report = steps_report(GRAPHS_ON)
    assert [s["label"] for s in report["steps"]] == [
        f"c={c} #{r}" for r in (1, 2, 3) for c in (1, 64)
    ]
    assert {s["verdict"] for s in report["steps"]} == {"memory-bandwidth-bound"}
    assert report["run"] == "memory-bandwidth-bound"
    assert report["run_text"] == "memory-bandwidth-bound at every concurrency"
    # Batch 1 reached two thirds of the 300 tok/s HBM roofline (4.96 ms TPOT).
    c1 = report["concurrencies"][0]
    assert c1["label"] == "c=1" and c1["roofline_share"] == pytest.approx(0.67, abs=0.01)


def test_graphs_off_decode_is_host_bound_and_the_advice_knows_graphs_are_off():
    results = load_results(GRAPHS_OFF)
    report = diagnose_results(results)
    assert {s["verdict"] for s in report["steps"]["steps"]} == {"host-bound"}
    # 3.8x below graphs on at batch 1, 17% of the roofline.
    assert report["steps"]["concurrencies"][0]["roofline_share"] == pytest.approx(0.17, abs=0.01)
    host = [f for f in report["findings"] if f.code == "host-bound"]
    assert [f.message.split(":")[0] for f in host] == ["c=1", "c=64"]
    assert all("CUDA graphs are off on this server" in f.message for f in host)
    assert "if off" not in format_report(report)


def test_judged_whole_the_same_samples_lose_the_distinction():
    # The benchmark as it ran before (one process per step, ~80% of each step start-up):
    # judged whole, graphs-on decode read host-bound, as graphs-off does; per step, from the
    # same samples, it is memory-bandwidth-bound.
    results = load_results(ONE_PROCESS_PER_STEP)
    whole = diagnose_results({**results, "steps": []})
    assert whole["steps"] is None and [f.code for f in whole["findings"]] == ["host-bound"]
    per_step = diagnose_results(results)["steps"]
    assert per_step["run_text"] == "memory-bandwidth-bound at every concurrency"


def busy_share(folder: Path) -> float:
    steps = steps_report(folder)["steps"]
    return sum(s["busy_share"] * s["span_s"] for s in steps) / sum(s["span_s"] for s in steps)


def test_one_driver_process_keeps_start_up_out_of_the_steps():
    # One python -m process per step: ~26 s a step, the GPU busy in 18% of it. The driver:
    # ~6.5 s a step, busy in 78% (load from its load_start).
    before, after = busy_share(ONE_PROCESS_PER_STEP), busy_share(GRAPHS_ON)
    assert before < 0.25 and after >= 0.6
    spans = [s["span_s"] for s in steps_report(GRAPHS_ON)["steps"]]
    assert max(spans) < 8 < min(s["span_s"] for s in steps_report(ONE_PROCESS_PER_STEP)["steps"])
    lines = read_json_lines(GRAPHS_ON / "steps.jsonl")
    assert lines[0]["warmup"] is True and all("load_start" in line for line in lines)


def test_the_ab_of_cuda_graphs_is_real_at_both_concurrencies():
    comparisons = compare(runs_by_concurrency([GRAPHS_OFF]), runs_by_concurrency([GRAPHS_ON]))
    assert [(c.concurrency, c.runs_a, c.runs_b, c.verdict) for c in comparisons] == [
        (1, 3, 3, "real"),
        (64, 3, 3, "real"),
    ]
    assert comparisons[0].difference_pct > 250 and comparisons[1].difference_pct > 100


@pytest.mark.parametrize("name", ["sse-chat-usage.txt", "sse-chat.txt"])
def test_the_decode_client_reads_the_real_streams(name):
    raw = (TINY / name).read_bytes()
    got = decode.read_stream(io.BytesIO(raw), sent=0.0)
    assert got["finish_reason"] == "length" and got["chunks"] == 24
    assert got["completion_tokens"] == 24
    assert got["usage_reported"] is (name == "sse-chat-usage.txt")


def test_the_real_benchmark_lines_lose_the_api_key_they_carry(tmp_path):
    # bench_serving copies GET /server_info, the api_key in clear, into every line (the
    # capture has it masked; put a key back to see it go).
    key = "sk-real-bench-line-KEY-0123"
    path = tmp_path / "bench.jsonl"
    lines = (GRAPHS_ON / "bench.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert all(row["server_info"]["api_key"] == "********" for row in rows)
    for row in rows:
        row["server_info"]["api_key"] = key
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert scrub_secrets(path) is True
    assert key not in path.read_text()
    scrubbed = read_json_lines(path)
    assert [r["output_throughput"] for r in scrubbed] == [r["output_throughput"] for r in rows]
    assert scrub_secrets(path) is False  # nothing left to mask


def test_a_real_results_folder_reports(tmp_path):
    from pyinfra_sglang.report.page import read_run, write_report

    folder = tmp_path / "h200" / "graphs-on"
    shutil.copytree(GRAPHS_ON, folder)
    page = write_report(read_run(folder), tmp_path / "out").read_text()
    assert "<h2>Verdict per step</h2>" in page and "c=64 #3" in page
    assert "memory-bandwidth-bound at every concurrency" in page


def test_the_ab_of_the_real_runs_reports(tmp_path):
    from pyinfra_sglang.report.page import read_run, write_ab_report

    for name, folder in (("off", GRAPHS_OFF), ("on", GRAPHS_ON)):
        shutil.copytree(folder, tmp_path / "h200" / name)
    page = write_ab_report(
        read_run(tmp_path / "h200" / "off"), read_run(tmp_path / "h200" / "on"), tmp_path / "ab"
    ).read_text()
    assert page.count('<td class="text">real</td>') == 2
    assert "Findings, A" in page and "CUDA graphs are off on this server" in page
