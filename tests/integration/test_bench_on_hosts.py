"""deploy/bench.py on real Debian 12 test hosts serving the stand-in SGLang: it runs the
stand-in bench_serving (real flags, real requests) with the GPU sampler (the stand-in
nvidia-ml-py) alongside, writes a results folder per host, changes nothing, keeps the API key
secret, compares with the previous run of the same settings, fails on a regression, and its
folder is what `pyinfra-sglang diagnose` reads."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results
from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

BENCH = "deploy/bench.py"
API_KEY = "sk-site-APIKEY-0123456789"
# Small, so a run takes seconds: 8 and 16 requests of 32 prompt and 16 output tokens.
SETTINGS = {"bench_concurrencies": "[1,4]", "bench_input_len": "32", "bench_output_len": "16"}
RUN_FILES = {
    "bench.jsonl",
    "samples.jsonl",
    "steps.jsonl",
    "report",
    "links.json",
    "profile.json",
    "settings.json",
    "bench.log",
    "sampler.log",
    "metrics.txt",
    "server_metrics.json",
}


BENCH_OP = "Benchmark the SGLang server and diagnose its bottleneck"


def bench(inventory, results: Path, failing: tuple[str, ...] = (), **data: str):
    """Run deploy/bench.py; ``failing``: the hosts whose benchmark must fail (a regression
    fails the host's operation). Nothing may change on any host, and no other failure."""
    options = [
        option
        for key, value in {**SETTINGS, "bench_results_dir": str(results), **data}.items()
        for option in ("--data", f"{key}={value}")
    ]
    started = time.monotonic()
    result = apply(inventory, BENCH, options=tuple(options), timeout=600)
    result.wall_s = time.monotonic() - started
    # A benchmark never changes a host; it exits 1 only where a host's results fail it.
    expected = [f"{BENCH_OP}: failed on {', '.join(sorted(failing))}"] if failing else []
    assert result.unchanged_problems(returncode=1 if failing else 0) == expected, result.describe()
    return result


def runs(results: Path, address: str) -> list[Path]:
    return sorted((results / address).iterdir())


def assert_key_secret(result, results: Path) -> None:
    assert API_KEY not in result.stdout + result.stderr
    for path in results.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path  # the report's PNGs too


def test_bench_writes_a_results_folder_per_host_and_changes_nothing(
    host_pool, hosts, inventory, tmp_path
):
    result = bench(inventory, tmp_path)
    assert result.returncode == 0, result.describe()
    print(f"bench run on {len(hosts)} test hosts: {result.wall_s:.1f} s")  # the measured wall time
    for h in hosts:
        [folder] = runs(tmp_path, h.address)
        assert {p.name for p in folder.iterdir()} == RUN_FILES
        lines = [json.loads(x) for x in (folder / "bench.jsonl").read_text().splitlines()]
        assert [(x["max_concurrency"], x["completed"]) for x in lines] == [(1, 8), (4, 16)]
        assert all(
            x["total_output_tokens"] == 16 * x["completed"] and x["output_throughput"] > 0
            for x in lines
        )
        assert all(
            x["backend"] == "sglang-oai-chat" and x["dataset_name"] == "random-ids" for x in lines
        )
        samples = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
        assert samples and all([g["index"] for g in s["gpus"]] == [0, 1] for s in samples)
        # The stand-in server's processes were found and measured.
        assert max(s["cpu"]["processes"] for s in samples) >= 1
        links = json.loads((folder / "links.json").read_text())
        assert [g["pcie"]["gen_max"] for g in links["gpus"]] == [5, 5]
        assert links["virtualization"]["container"] == "systemd-nspawn"
        profile = json.loads((folder / "profile.json").read_text())
        assert (profile["model_profile"], profile["gpu"], profile["tp_size"]) == (
            "dense-bf16",
            "NVIDIA H200",
            2,
        )
        assert profile["memory_bandwidth_gbs"] == 4800 and profile["bound_tokens_per_s"] > 0
        # SGLang's /metrics polled during the run (the profile enables metrics).
        server = json.loads((folder / "server_metrics.json").read_text())
        assert server["polls"] >= 1 and 0 <= server["peak_kv_cache_usage"] <= 1
        # At most 4 requests at once against the stand-in's 1024 running slots: none waits.
        assert server["queued_requests"] == server["peak_queued_requests"] == 0
        # The report page names its run, holds the charts and the findings, loads nothing.
        page = (folder / "report" / "report.html").read_text()
        assert f"Benchmark report: {h.address} / {folder.name}</h1>" in page
        # Throughput, GPU 0, GPU 1, and the server's timeline (the poller stamps its polls).
        assert page.count('src="data:image/png;base64,') == 4
        assert "<h2>The server's side</h2>" in page
        assert "Findings" in page and "<script" not in page
        assert not re.search(r'(src|href)="(?!data:)[a-z]+:', page)  # nothing from elsewhere
        assert {p.name for p in (folder / "report").iterdir()} == {
            "report.html",
            "throughput.png",
            "server-timeline.png",
            "gpu0-timeline.png",
            "gpu1-timeline.png",
        }
        steps = [json.loads(x) for x in (folder / "steps.jsonl").read_text().splitlines()]
        # One driver process: a warm-up at the highest concurrency, then each step.
        assert [(s["concurrency"], s.get("warmup", False)) for s in steps] == [
            (4, True),
            (1, False),
            (4, False),
        ]
        # The stand-in's lines carry /server_info with the key, as real bench_serving's do:
        # scrubbed on arrival.
        assert all(x["server_info"]["api_key"] == "********" for x in lines)
        settings = json.loads((folder / "settings.json").read_text())
        assert (
            settings["settings"]["concurrencies"] == [1, 4]
            and settings["settings"]["sglang_version"] == "0.5.23"
        )
        assert len(settings["hash"]) == 16
        # The temporary folder on the host is gone.
        assert (
            host_pool.run(h, "ls -d /tmp/pyinfra-sglang-bench.* 2>/dev/null || true").stdout.strip()
            == ""
        )
    assert result.stderr.count("no earlier run with these settings") == len(hosts)
    assert (
        result.stderr.count("Findings:") == len(hosts)
        and "Decode roofline (batch 1)" in result.stderr
    )
    assert_key_secret(result, tmp_path)

    # The same settings again: compared with the first run (a lenient threshold, so a busy
    # machine's jitter cannot fail it; the threshold is no setting of the measurement).
    again = bench(inventory, tmp_path, bench_regression_pct="60")
    assert again.returncode == 0, again.describe()
    for h in hosts:
        first, second = runs(tmp_path, h.address)
        assert json.loads((second / "settings.json").read_text())["hash"] == settings["hash"]
        assert f"output throughput against {first.name}:" in again.stderr
    assert "no earlier run with these settings" not in again.stderr
    assert_key_secret(again, tmp_path)

    # Other settings start a series of their own.
    other = bench(inventory, tmp_path, bench_concurrencies="[2]")
    assert other.returncode == 0 and other.stderr.count(
        "no earlier run with these settings"
    ) == len(hosts)


def test_a_throughput_drop_fails_the_host(hosts, inventory, tmp_path):
    first = bench(inventory, tmp_path)
    assert first.returncode == 0, first.describe()
    # Plant a faster past: the first run's folder now says it served 10x the tokens per second.
    regressed = hosts[0]
    [earlier] = runs(tmp_path, regressed.address)
    lines = [json.loads(x) for x in (earlier / "bench.jsonl").read_text().splitlines()]
    (earlier / "bench.jsonl").write_text(
        "".join(
            json.dumps({**x, "output_throughput": x["output_throughput"] * 10}) + "\n"
            for x in lines
        )
    )
    # A lenient threshold, as above: the planted drop is 90%, while the other host's real
    # runs on a busy machine once differed by 10.2% (a CI run, 2026-12-06) and failed it.
    result = bench(inventory, tmp_path, failing=(regressed.address,), bench_regression_pct="60")
    # The operation's own lines, not the end-of-run summary (which repeats the first failure).
    run_output = result.stderr.split("--> Summary, one line a host:")[0]
    failures = [x for x in run_output.splitlines() if "bench failed:" in x]
    assert len(failures) == 2 and all(regressed.address in x for x in failures), result.stderr
    assert "bench failed: concurrency 1: output throughput" in failures[0]
    assert "bench failed: concurrency 4: output throughput" in failures[1]
    assert all("beyond the 60% threshold" in x and str(earlier) in x for x in failures)
    # The other host compared with its own, unplanted run and passed.
    assert f"output throughput against {runs(tmp_path, hosts[1].address)[0].name}" in result.stderr
    # The regressed run is kept, with its settings: it is the one the next run compares with.
    assert len(runs(tmp_path, regressed.address)) == 2
    assert_key_secret(result, tmp_path)


def test_diagnose_reads_a_bench_folder(inventory, hosts, tmp_path):
    assert bench(inventory, tmp_path).returncode == 0
    [folder] = runs(tmp_path, hosts[0].address)
    report = diagnose_results(load_results(folder))
    assert [g["index"] for g in report["gpus"]] == [0, 1]
    assert report["gpus"][0]["samples"] >= 1 and report["gpus"][0]["pcie_link"] == "PCIe Gen5 x16"
    assert report["findings"], report
    roofline = report["roofline"]
    assert [r["max_concurrency"] for r in roofline["runs"]] == [1, 4]
    assert roofline["tp_size"] == 2 and roofline["bound_tokens_per_s"] > 0
    text = format_report(report)
    assert "GPU 1:" in text and "Findings:" in text and "concurrency 4:" in text
