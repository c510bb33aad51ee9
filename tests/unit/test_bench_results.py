"""Benchmark results on the controller: run folders, the run a new one is compared with,
regressions, the checks of a run's lines, and A/B verdicts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from checks.served_benchmark import check_lines, why_not_ready
from pyinfra_sglang.cli.main import main
from pyinfra_sglang.diagnosis import ab_compare as ab
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.served_benchmark.regression import (
    Regression,
    regressions,
    throughput_by_concurrency,
)
from pyinfra_sglang.served_benchmark.results import (
    host_folder,
    links_document,
    new_run_folder,
    previous_run,
    profile_document,
    settings_document,
    write_json,
)
from pyinfra_sglang.served_benchmark.settings import bench_settings

NOON = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)


def line(concurrency: int, throughput: float, completed: int = 8) -> dict:
    return {"max_concurrency": concurrency, "output_throughput": throughput, "completed": completed}


def run(folder: Path, digest: str, lines: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    write_json(folder / "settings.json", settings_document({"any": 1}, digest))
    return folder


# --- run folders ---------------------------------------------------------------------------


def test_run_folders_are_named_by_host_and_utc_time(tmp_path):
    folder = new_run_folder(tmp_path, "@docker/abc 1", NOON)
    assert folder == tmp_path / "docker_abc_1" / "20261130T120005Z" and folder.is_dir()
    # Two runs in one second: the second gets a suffix that still sorts after the first.
    second = new_run_folder(tmp_path, "@docker/abc 1", NOON)
    assert second.name == "20261130T120005Z-2" and second.name > folder.name
    local_time = datetime(2026, 11, 30, 13, 0, 5, tzinfo=timezone(timedelta(hours=1)))
    assert new_run_folder(tmp_path, "h", local_time).name == "20261130T120005Z"
    assert host_folder(tmp_path, "127.0.0.2") == tmp_path / "127.0.0.2"


def test_previous_run_is_the_latest_earlier_one_with_the_same_settings(tmp_path):
    host = tmp_path / "h"
    oldest = run(host / "20261130T100000Z", "same", [line(1, 10)])
    run(host / "20261130T103000Z", "other", [line(1, 99)])
    latest_same = run(host / "20261130T110000Z", "same", [line(1, 11)])
    (host / "20261130T113000Z").mkdir()  # a failed run: no settings.json
    (host / "20261130T113000Z" / "bench.jsonl").write_text("")
    current = host / "20261130T120000Z"
    run(host / "20261130T130000Z", "same", [line(1, 13)])  # later than the current one
    assert previous_run(host, current, "same") == latest_same
    assert previous_run(host, latest_same, "same") == oldest
    assert previous_run(host, current, "unknown") is None
    assert previous_run(tmp_path / "nothing-here", current, "same") is None


def _placed(profile, gpus: int, arch: str = "sm_90"):
    from pyinfra_sglang.serving.placement import GpuSet, place

    return place(profile, GpuSet(count=gpus, memory_gb=141, arch=arch), sglang_version="0.5.17")


H200_ROW = {
    "index": "0",
    "name": "NVIDIA H200",
    "memory.total": "143771 MiB",
    "compute_cap": "9.0",
    "pcie.link.gen.current": "5",
    "pcie.link.gen.max": "5",
    "pcie.link.width.current": "16",
    "pcie.link.width.max": "16",
}


def test_the_record_holds_the_settings_the_server_runs_with_on_its_architecture(tmp_path):
    # A profile whose [arch.sm_90] table lowers the graph batch size: the server on an H200
    # runs with 32, so profile.json, which the diagnosis advises from, must say 32 (the
    # record was once written from the profile before its [arch.*] table applied: 64).
    from pyinfra_sglang.inventory import HostConfig
    from pyinfra_sglang.serving.placement import NodePosition
    from pyinfra_sglang.serving.profiles import builtin_profile_dir
    from pyinfra_sglang.serving.service_files import host_placement

    base = (builtin_profile_dir() / "dense-bf16.toml").read_text()
    top = 'archs = ["sm_90"]\ncuda_graph_max_bs = 64\n'
    (tmp_path / "dense-graphs.toml").write_text(
        top + base + "\n[arch.sm_90]\ncuda_graph_max_bs = 32\n"
    )
    config = HostConfig(
        sglang_model_profile="dense-graphs",
        sglang_profile_dirs=[str(tmp_path)],
        sglang_version="0.5.17",
    )
    gpus = [H200_ROW]
    document = profile_document(host_placement(config, "gpu-1", gpus, NodePosition()), gpus)
    assert (document["cuda_graph"], document["cuda_graph_max_bs"]) == (True, 32)
    assert (document["model_profile"], document["gpu"], document["tp_size"]) == (
        "dense-graphs",
        "NVIDIA H200",
        1,
    )


def test_links_and_profile_documents_are_what_diagnose_reads():
    gpus = [
        {
            "index": "0",
            "name": "NVIDIA H200",
            "pcie.link.gen.current": "5",
            "pcie.link.gen.max": "5",
            "pcie.link.width.current": "16",
            "pcie.link.width.max": "16",
        },
        {
            "index": "1",
            "name": "NVIDIA H200",
            "pcie.link.gen.current": "1",
            "pcie.link.gen.max": "5",
            "pcie.link.width.current": "16",
            "pcie.link.width.max": "16",
        },
    ]
    links = links_document(gpus, {"container": None, "vm": "kvm"})
    assert links["virtualization"] == {"container": None, "vm": "kvm"}
    assert links["gpus"][1] == {
        "index": 1,
        "name": "NVIDIA H200",
        "pcie": {"gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16},
    }
    from pyinfra_sglang.diagnosis.diagnose import roofline_from
    from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

    dense = load_profile("dense-bf16")
    document = profile_document(_placed(dense, 2), gpus)
    assert (document["model_profile"], document["gpu"], document["tp_size"]) == (
        "dense-bf16",
        "NVIDIA H200",
        2,
    )
    assert roofline_from(document).tokens_per_s == pytest.approx(
        2 * 4800 / (dense.active_params_b * 2)
    )
    # Inventory overrides are what is served, so they are what the roofline uses.
    halved = merge_overrides(dense, {"bytes_per_param": 1})
    assert roofline_from(profile_document(_placed(halved, 2), gpus)).tokens_per_s == pytest.approx(
        2 * 4800 / dense.active_params_b
    )
    # Without the numbers (no GPU known) there is no roofline, and the document says what is known.
    # The server's CUDA graph settings go with it, for the advice on launch-bound load.
    assert profile_document(_placed(dense, 1), []) == {
        "model_profile": "dense-bf16",
        "gpu": None,
        "tp_size": 1,
        "cuda_graph": True,
        "cuda_graph_max_bs": None,
    }


# --- regressions ---------------------------------------------------------------------------


def test_a_drop_beyond_the_threshold_is_a_regression():
    before = {1: 100.0, 8: 400.0, 32: 900.0, 64: 1000.0}
    after = {1: 89.9, 8: 360.0, 32: 1200.0, 128: 10.0}
    found = regressions(before, after, 10.0)
    # 1: -10.1% fails; 8: exactly -10% does not; 32 rose; 64 and 128 were measured once.
    assert found == [Regression(1, 100.0, 89.9, 10.0)]
    message = found[0].message()
    assert (
        message
        == "concurrency 1: output throughput 100.0 -> 89.9 tok/s (-10.1%), beyond the 10% threshold"
    )
    assert regressions(before, after, 12.0) == []


def test_repeats_are_averaged_per_concurrency():
    lines = [line(1, 10), line(8, 80), line(1, 12), line(8, 100), {"max_concurrency": 4}]
    assert throughput_by_concurrency(lines) == {1: 11.0, 8: 90.0}


# --- a run's own lines ---------------------------------------------------------------------


def test_lines_need_one_result_per_repeat_and_concurrency_with_every_request_done():
    settings = bench_settings(HostConfig(bench_concurrencies=[1, 4], bench_repeat=2), "0.5.23")
    good = [line(1, 1, 8), line(4, 1, 16)] * 2
    assert check_lines(good, settings) == []
    assert check_lines(good[:3], settings) == ["bench.jsonl holds 3 results, expected 4"]
    assert check_lines([*good[:3], line(4, 1, 15)], settings) == [
        "concurrency 4: 15 of 16 requests completed"
    ]


def test_a_host_without_sglang_or_a_running_service_is_not_benchmarked():
    running = {"ActiveState": "active", "SubState": "running"}
    assert why_not_ready(running, "0.5.23", "/v") is None
    assert "holds no SGLang" in why_not_ready(running, None, "/v")
    assert "is not running (failed)" in why_not_ready({"ActiveState": "failed"}, "0.5.23", "/v")
    assert "not installed" in why_not_ready({}, "0.5.23", "/v")


# --- A/B -----------------------------------------------------------------------------------


def test_the_reference_case_a_5_percent_gain_within_a_6_percent_spread_is_noise():
    # CUDA graphs: 225 tok/s without, +5% with, runs spread ±6% around their mean.
    [found] = ab.compare({64: [211.5, 225.0, 238.5]}, {64: [236.25, 236.25]})
    assert found.difference_pct == pytest.approx(5.0)
    assert found.spread_a_pct == pytest.approx(6.0)
    assert found.verdict == "noise"


def test_a_difference_beyond_both_spreads_is_real_either_way():
    [gain] = ab.compare({8: [100, 102, 98]}, {8: [110, 112, 108]})
    assert gain.verdict == "real" and gain.difference_pct == pytest.approx(10.0)
    [loss] = ab.compare({8: [100, 101]}, {8: [90, 91]})
    assert loss.verdict == "real" and loss.difference_pct < -9


def test_one_run_on_a_side_cannot_tell():
    [found] = ab.compare({1: [10.0]}, {1: [20.0, 20.5]})
    assert found.verdict == "not enough runs to tell" and found.runs_a == 1


def test_only_shared_concurrencies_are_compared():
    assert [c.concurrency for c in ab.compare({1: [1, 1], 8: [2, 2]}, {8: [2, 2], 32: [3, 3]})] == [
        8
    ]


def cli(*argv: str) -> int:
    return main(list(argv))


def test_ab_compare_command_reads_run_folders(tmp_path, capsys):
    a = [
        run(tmp_path / f"a{i}", "x", [line(1, v), line(8, 10 * v)])
        for i, v in enumerate((100, 94, 106))
    ]
    b = [run(tmp_path / f"b{i}", "y", [line(1, 105), line(8, 1500)]) for i in range(2)]
    assert cli("ab-compare", "--a", *map(str, a), "--b", *map(str, b)) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[-1] == "noise" and "+5.0%" in table[1]
    assert table[2].split()[-1] == "real" and "+50.0%" in table[2]
    assert cli("ab-compare", "--a", *map(str, a), "--b", *map(str, b), "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["concurrency"], r["runs_a"], r["runs_b"], r["verdict"]) for r in rows] == [
        (1, 3, 2, "noise"),
        (8, 3, 2, "real"),
    ]
    assert cli("ab-compare", "--a", str(tmp_path / "missing"), "--b", str(b[0])) == 2
    assert "no bench.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"max_concurrency": 1, "output_throughput": "fast"}\n', "output_throughput is 'fast'"),
        ('{"max_concurrency": [1], "output_throughput": 1.0}\n', "max_concurrency is [1]"),
        ('{"max_concurrency": 0, "output_throughput": 1.0}\n', "max_concurrency is 0"),
        ('{"max_concurrency": 1, "output_throughput": NaN}\n', "output_throughput is nan"),
        ("[1, 2]\n", "line 1 is not a JSON object"),
        ('{"a": 1}\n{broken\n{"a": 1}\n', "line 2 is not JSON"),
    ],
)
def test_ab_compare_names_a_bad_line_and_exits_2(tmp_path, capsys, text, message):
    good = run(tmp_path / "good", "x", [line(1, 100), line(1, 101)])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "bench.jsonl").write_text(text)
    assert cli("ab-compare", "--a", str(good), "--b", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ab-compare: {bad / 'bench.jsonl'}") and message in err, err
    assert "Traceback" not in err


def test_ab_compare_on_a_file_that_is_not_text_exits_2(tmp_path, capsys):
    good = run(tmp_path / "good", "x", [line(1, 100)])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "bench.jsonl").write_bytes(b"\xff\xfe\x00")
    assert cli("ab-compare", "--a", str(bad), "--b", str(good)) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_diagnosis_without_a_roofline_when_the_gpu_has_no_spec(tmp_path):
    from checks.served_benchmark import diagnosis_text

    capture = (
        Path(__file__).resolve().parents[1]
        / "fixtures"
        / "gpu"
        / "h200x2-nvlink-vm"
        / "samples.json"
    )
    (tmp_path / "samples.json").write_bytes(capture.read_bytes())
    write_json(
        tmp_path / "profile.json", {"profile": "dense-bf16", "gpu": "NVIDIA H200", "tp_size": 2}
    )
    assert "Decode roofline (batch 1)" in diagnosis_text(tmp_path)
    write_json(
        tmp_path / "profile.json",
        {"profile": "dense-bf16", "gpu": "NVIDIA Unknown X", "tp_size": 2},
    )
    text = diagnosis_text(tmp_path)
    assert "Findings:" in text and "Decode roofline" not in text
    assert text.splitlines()[-1].startswith(
        "(no decode roofline: no spec for GPU 'NVIDIA Unknown X'"
    )
