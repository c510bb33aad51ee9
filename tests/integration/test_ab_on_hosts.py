"""deploy/ab.py on real Debian 12 test hosts serving the stand-in SGLang: benchmark A, serve
B, benchmark B, serve A again, compare; the host ends on A's configuration."""

from __future__ import annotations

import json

import pytest

from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

AB = "deploy/ab.py"
UNIT = "/etc/systemd/system/sglang.service"
B = {"cuda_graph": False}
SETTINGS = {
    "bench_concurrencies": "[2]",
    "bench_input_len": "32",
    "bench_output_len": "16",
    "bench_repeat": "2",
}


def options(results, **data: str) -> tuple[str, ...]:
    values = {
        **SETTINGS,
        "bench_results_dir": str(results),
        "bench_ab_overrides": json.dumps(B),
        **data,
    }
    return tuple(option for key, value in values.items() for option in ("--data", f"{key}={value}"))


def argv(host_pool, test_host) -> list[str]:
    return json.loads(host_pool.run(test_host, "cat /run/sglang-standin/30000.json").stdout)["argv"]


def test_ab_benchmarks_both_sides_and_ends_on_a(host_pool, hosts, inventory, tmp_path):
    before = {h.address: host_pool.run(h, f"sha256sum {UNIT}").stdout for h in hosts}
    assert all("--disable-cuda-graph" not in argv(host_pool, h) for h in hosts)
    result = apply(inventory, AB, options=options(tmp_path), timeout=900)
    assert result.returncode == 0, result.describe()
    for h in hosts:
        # Only the two service switches changed the host; the benchmarks and the report did not.
        assert result.changed(h.address) == [
            "A/B: serve side B ({'cuda_graph': False})",
            "A/B: serve side A again",
        ]
        side_a, side_b = sorted((tmp_path / h.address).iterdir())
        settings_a = json.loads((side_a / "settings.json").read_text())["settings"]
        settings_b = json.loads((side_b / "settings.json").read_text())["settings"]
        assert settings_b["profile_overrides"] == B and settings_a["profile_overrides"] == {}
        ab = json.loads((side_b / "ab.json").read_text())
        assert ab["a"] == str(side_a) and ab["b_overrides"] == B
        [row] = ab["comparisons"]
        assert (row["concurrency"], row["runs_a"], row["runs_b"]) == (2, 2, 2)
        assert row["verdict"] in ("noise", "real") and row["mean_a"] > 0 and row["mean_b"] > 0
        # The A/B page beside ab.json names both runs; each run has its own page too.
        page = (side_b / "ab-report" / "report.html").read_text()
        assert f"A/B: {h.address} / {side_a.name} (A) against {h.address} / {side_b.name}" in page
        assert all((side / "report" / "report.html").is_file() for side in (side_a, side_b))
        # Back on A: the same unit as before, served without the B flag.
        assert host_pool.run(h, f"sha256sum {UNIT}").stdout == before[h.address]
        assert "--disable-cuda-graph" not in argv(host_pool, h)
        assert host_pool.run(h, "systemctl is-active sglang.service").stdout.strip() == "active"
    assert result.stderr.count("A/B, B = {'cuda_graph': False}") == len(hosts)


def test_ab_with_one_run_a_side_is_refused_before_any_change(hosts, inventory, tmp_path):
    result = apply(inventory, AB, options=options(tmp_path, bench_repeat="1"))
    assert result.returncode != 0 and not result.executed, result.describe()
    assert "bench_repeat = 1" in result.stderr and "allowed: 2..100" in result.stderr
    assert not tmp_path.joinpath(hosts[0].address).exists()


def test_ab_overrides_that_the_profile_rejects_are_refused_before_any_change(
    hosts, inventory, tmp_path
):
    result = apply(
        inventory, AB, options=options(tmp_path, bench_ab_overrides='{"mem_fraction_static": 2.5}')
    )
    assert result.returncode != 0 and not result.executed, result.describe()
    assert "bench_ab_overrides" in result.stderr and "mem_fraction_static" in result.stderr
