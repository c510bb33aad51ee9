"""deploy/tune.py on real Debian 12 test hosts serving the stand-in SGLang (which decodes 4.6x
slower with CUDA graphs off, as real SGLang 0.5.17 did on an H200, and fails to start above
SGLANG_STANDIN_MAX_MEM_FRACTION, as a real one runs out of memory): each trial served with the
service role's health wait and rollback, benchmarked, judged; the journal resumes a search."""

from __future__ import annotations

import json

import pytest

from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

TUNE = "deploy/tune.py"
UNIT = "/etc/systemd/system/sglang.service"
SETTINGS = {
    "bench_concurrencies": "[2]",
    "bench_input_len": "32",
    "bench_output_len": "16",
    "bench_repeat": "2",
    "tune_budget_s": "1800",
}


def options(results, **data: str) -> tuple[str, ...]:
    values = {**SETTINGS, "bench_results_dir": str(results), **data}
    return tuple(option for key, value in values.items() for option in ("--data", f"{key}={value}"))


def argv(host_pool, test_host) -> list[str]:
    return json.loads(host_pool.run(test_host, "cat /run/sglang-standin/30000.json").stdout)["argv"]


def journal(results, address: str) -> list[dict]:
    [folder] = (results / address).glob("tune-*")
    lines = [json.loads(x) for x in (folder / "tune.jsonl").read_text().splitlines()]
    return lines[1:]


def test_tune_finds_graphs_must_stay_on_and_leaves_the_host_as_it_was(
    host_pool, hosts, inventory, tmp_path
):
    before = {h.address: host_pool.run(h, f"sha256sum {UNIT}").stdout for h in hosts}
    result = apply(
        inventory, TUNE, options=options(tmp_path, tune_settings='["cuda_graph"]'), timeout=900
    )
    assert result.returncode == 0, result.describe()
    for h in hosts:
        rounds = journal(tmp_path, h.address)
        assert [(r["trial"], r["settings"]["cuda_graph"], r["status"]) for r in rounds] == [
            (0, True, "ok"),
            (1, False, "ok"),
        ]
        # Served for the trial, then back to the winner: the unit it started with (the search
        # itself counts as a change: it runs as a command; the baseline and benchmarks do not).
        assert result.changed(h.address) == [
            "Tune the SGLang server's settings",
            "Tune trial 1: serve cuda_graph = False",
            "Tune: serve the winner",
        ]
        assert host_pool.run(h, f"sha256sum {UNIT}").stdout == before[h.address]
        assert "--disable-cuda-graph" not in argv(host_pool, h)
        [folder] = (tmp_path / h.address).glob("tune-*")
        table = (folder / "tune.txt").read_text()
        assert "cuda_graph = False" in table and "worse (-" in table
        assert "sglang_profile_overrides = {}" in table
        assert "Tuning " + h.address in (folder / "tune.html").read_text()
    assert result.stderr.count("worse (-") >= len(hosts)


def test_a_failed_start_is_recorded_the_search_goes_on_and_a_rerun_resumes(
    host_pool, hosts, inventory, tmp_path
):
    data = {
        "tune_settings": '["mem_fraction_static"]',
        "tune_keep": "false",
        "sglang_env": '{"SGLANG_STANDIN_MAX_MEM_FRACTION": "0.86"}',
    }
    first = apply(inventory, TUNE, options=options(tmp_path, **data), timeout=1200)
    assert first.returncode == 0, first.describe()
    recorded = {}  # rounds per host: close calls make them differ between hosts
    for h in hosts:
        rounds = recorded[h.address] = journal(tmp_path, h.address)
        tried = [
            (r["settings"]["mem_fraction_static"], r["status"]) for r in rounds if r["round"] == 1
        ]
        assert tried == [
            (None, "ok"),
            (0.8, "ok"),
            (0.85, "ok"),
            (0.88, "failed"),
            (0.92, "failed"),
        ]
        failed = [r for r in rounds if r["status"] == "failed"]
        assert all("restored the previous settings" in r["error"] for r in failed)
        # The host serves again after every failure, and ends on its starting settings.
        assert host_pool.run(h, "systemctl is-active sglang.service").stdout.strip() == "active"
        assert "--mem-fraction-static" not in argv(host_pool, h)
    # Run again: the same search, already recorded: nothing is served or measured again.
    again = apply(inventory, TUNE, options=options(tmp_path, **data), timeout=600)
    assert again.returncode == 0, again.describe()
    assert again.stderr.count("resuming the search") == len(hosts)
    for h in hosts:
        assert again.changed(h.address) == ["Tune the SGLang server's settings"]
        assert journal(tmp_path, h.address) == recorded[h.address]


def test_tuning_a_setting_that_does_not_exist_is_refused_before_any_change(
    hosts, inventory, tmp_path
):
    result = apply(inventory, TUNE, options=options(tmp_path, tune_settings='["cuda_graphs"]'))
    assert result.returncode != 0 and not result.executed, result.describe()
    assert "tune_settings" in result.stderr and "allowed: cuda_graph," in result.stderr
    assert not tmp_path.joinpath(hosts[0].address).exists()
