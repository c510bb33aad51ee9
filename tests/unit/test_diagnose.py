"""Bottleneck rules (pyinfra_sglang/diagnosis/bottlenecks.py) and the diagnose command
(pyinfra_sglang/diagnosis/diagnose.py).

Rules are checked on real samples: the shared 2x H200 capture (samples.json: idle, PCIe copies,
an NVLink copy and a matmul, ~0.28 s apart) and the sampler's own run on that machine
(h200x2-nvlink-vm-sampler: 0.1 s, phases timed by the load script); and on synthetic series
for the reference deployment (8 GPUs at 0% over idle Gen5 links while 225 tok/s were served).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.diagnosis.bottlenecks import diagnose
from pyinfra_sglang.diagnosis.diagnose import stream_rate
from pyinfra_sglang.diagnosis.samples import load_samples, read_json_lines, summarize_gpu

GPU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURE = GPU_FIXTURES / "h200x2-nvlink-vm"
SAMPLER_RUN = GPU_FIXTURES / "h200x2-nvlink-vm-sampler"

# Index ranges of samples.json's phases, read from the file (GPU 0; GPU 1 stays idle but for
# row 13, the receiving end of the NVLink copy):
#   0-1   start-up: GPU 0 clock rising from 345 MHz
#   2-9   idle: util 0%, PCIe < 3 MB/s, 1980 MHz, power settling at ~119 W
#   10-12 host<->device copies: PCIe RX 59.4-59.6 GB/s, then TX 62.1 GB/s; util 0->90->100%,
#         memory util 2%, 1980 MHz, 119-124 W
#   13    GPU0->GPU1 over NVLink: util 100%, PCIe idle (one sample)
#   14-16 bf16 matmul: util 24/100/68%, memory util 0/23/16%, SM 1890/1500/1965 MHz, 157-325 W
#   17-18 idle again, power falling
IDLE, COPY, MATMUL = range(2, 10), range(10, 13), range(14, 17)


def _smi_q_limits() -> list[dict]:
    """Power limit and max SM clock per GPU from the capture's nvidia-smi -q (700 W, 1980 MHz),
    read by the pynvml double's own parser."""
    spec = importlib.util.spec_from_file_location(
        "pynvml_double", GPU_FIXTURES.parents[1] / "doubles" / "pynvml.py"
    )
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    return double._smi_q_values()


def _capture_facts() -> dict[int, dict]:
    """Link facts of the capture's GPUs (nvml.json) and their limits (smi_q.txt)."""
    nvml = json.loads((CAPTURE / "nvml.json").read_text())["gpus"]
    limits = _smi_q_limits()
    return {
        g["index"]: {
            "pcie": {
                "gen_current": g["pcie_gen_cur"],
                "gen_max": g["pcie_gen_max"],
                "width_current": g["pcie_width_cur"],
                "width_max": g["pcie_width_max"],
            },
            "power_limit_w": limits[g["index"]]["power_limit_mw"] / 1000,
            "sm_clock_max_mhz": limits[g["index"]]["sm_clock_max"],
        }
        for g in nvml
    }


@pytest.fixture(scope="module")
def capture():
    return load_samples(CAPTURE / "samples.json")


def _codes(findings) -> list[tuple[str, int | None]]:
    return [(f.code, f.gpu) for f in findings]


def test_capture_is_read_into_the_sampler_shape(capture):
    assert len(capture) == 19 and capture[0]["t"] == 0
    gpu0 = capture[12]["gpus"][0]
    assert gpu0 == {
        "index": 0,
        "gpu_util": 100,
        "mem_util": 2,
        "pcie_tx_kbps": 62130313,
        "pcie_rx_kbps": 457,
        "sm_clock_mhz": 1980,
        "power_w": 124.166,
    }
    assert capture[-1]["t"] == pytest.approx(1796006040.7475557 - 1796006035.4354496)


def test_capture_idle_window_is_idle(capture):
    findings = diagnose([capture[i] for i in IDLE], _capture_facts())
    assert _codes(findings) == [("idle", None)]
    assert "No load while sampling" in findings[0].message


def test_capture_copy_window_is_interconnect_bound_not_compute(capture):
    findings = diagnose([capture[i] for i in COPY], _capture_facts())
    assert _codes(findings) == [("interconnect-bound", 0), ("idle", 1)]
    copy = findings[0]
    # NVML read 90-100% busy during the copy: the rule must not call that compute.
    assert copy.evidence["gpu_util_median"] == 90
    assert copy.evidence["links"]["PCIe Gen5 x16"]["saturated_share"] == 1.0
    assert "PCIe Gen5 x16 ran at >= 70%" in copy.message and "63.0 GB/s" in copy.message
    assert "memory util 2%" in copy.message


def test_capture_matmul_window_is_compute_bound(capture):
    findings = diagnose([capture[i] for i in MATMUL], _capture_facts())
    assert _codes(findings) == [("compute-bound", 0), ("idle", 1)]
    assert findings[0].level == "ok"
    assert "SM clock pulled down to 1732 MHz = 88% of its 1980 MHz max" in findings[0].message
    assert "idle while GPU 0 worked" in findings[1].message


def test_matmul_without_limits_is_not_called_compute(capture):
    # Without the power limit and max clock nothing tells compute from a transfer at 20%
    # memory utilization: the rule says it cannot tell rather than guess.
    findings = diagnose([capture[i] for i in MATMUL])
    assert _codes(findings) == [("undetermined", 0), ("idle", 1)]


def test_single_nvlink_copy_sample_is_not_compute(capture):
    # Row 13: util 100% with PCIe idle and no NVLink counters in this capture.
    findings = diagnose([capture[13]], _capture_facts())
    assert ("compute-bound", 0) not in _codes(findings)
    assert ("undetermined", 0) in _codes(findings)


@pytest.fixture(scope="module")
def sampler_run():
    samples = read_json_lines(SAMPLER_RUN / "samples.jsonl")
    phases = json.loads((SAMPLER_RUN / "phases.json").read_text())

    def window(phase: str) -> list[dict]:
        # Skip the first 0.3 s of a phase: NVML's utilization lags its start.
        start, end, _ = phases[phase]
        return [s for s in samples if start + 0.3 <= s["time"] < end]

    return window


@pytest.mark.parametrize("phase", ["h2d", "d2h"])
def test_real_pcie_copies_are_interconnect_bound(sampler_run, phase):
    window = sampler_run(phase)
    assert len(window) > 30
    findings = diagnose(window)  # link facts and limits come from the samples themselves
    assert _codes(findings) == [("interconnect-bound", 0), ("idle", 1)]
    link = findings[0].evidence["links"]["PCIe Gen5 x16"]
    assert link["busier_p90_gbs"] / link["capacity_gbs"] > 0.9


def test_real_nvlink_copy_is_interconnect_bound_on_both_ends(sampler_run):
    findings = diagnose(sampler_run("nvlink"))
    assert _codes(findings) == [("interconnect-bound", 0), ("interconnect-bound", 1)]
    sender = findings[0].evidence["links"]["NVLink"]
    # KiB counters over time vs the copy's own 384.8 GB/s; 450 GB/s per direction on an H200.
    assert sender["capacity_gbs"] == 450
    assert 370 < sender["busier_p90_gbs"] < 420
    assert findings[0].message.startswith("GPU 0: NVLink ran at")


def test_real_matmul_is_compute_bound_by_power_and_clock(sampler_run):
    findings = diagnose(sampler_run("matmul"))
    assert _codes(findings) == [("compute-bound", 0), ("idle", 1)]
    message = findings[0].message
    assert re.search(r"power 69\d W = 99% of the 700 W limit", message)
    assert "SM clock pulled down to 15" in message


def test_real_idle_is_idle(sampler_run):
    findings = diagnose(sampler_run("idle"))
    assert _codes(findings) == [("idle", None)]


def _reference_samples(busy_process_percent: float | None, n: int = 50) -> list[dict]:
    """The reference deployment as its write-up tells it (docs/sources.md, The reference
    deployment): 8 GPUs reading 0% over Gen5 x16 links that carried 581/693 KB/s (TX/RX)
    while the benchmark ran."""
    gpu = {
        "gpu_util": 0,
        "mem_util": 0,
        "pcie_tx_kbps": 581,
        "pcie_rx_kbps": 693,
        "sm_clock_mhz": 2430,
        "sm_clock_max_mhz": 2430,
        "power_w": 90.0,
        "power_limit_w": 600.0,
        "pcie_gen": 5,
        "pcie_width": 16,
        "pcie_gen_max": 5,
        "pcie_width_max": 16,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    }
    cpu = None
    if busy_process_percent is not None:
        cpu = {
            "processes": 9,
            "percent": busy_process_percent + 20,
            "max_process_percent": busy_process_percent,
        }
    return [
        {"t": 0.2 * (k + 1), "gpus": [{"index": i, **gpu} for i in range(8)], "cpu": cpu}
        for k in range(n)
    ]


BENCH = [
    {
        "max_concurrency": 64,
        "completed": 256,
        "output_throughput": 225.0,
        "total_throughput": 516.0,
        "median_tpot_ms": 270.0,
    }
]


def test_reference_case_is_host_bound_and_names_the_vm():
    findings = diagnose(
        _reference_samples(busy_process_percent=None),
        bench=BENCH,
        virtualization={"container": None, "vm": "kvm"},
    )
    assert _codes(findings) == [("host-bound", None)]
    message = findings[0].message
    assert "225 output tok/s at concurrency 64" in message
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7 busy in at most 0%" in message
    assert "693 KB/s" in message and "63.0 GB/s" in message
    assert "VM (kvm)" in message
    assert "server CPU use not sampled" in message


def test_reference_case_with_a_pegged_scheduler_is_launch_bound():
    findings = diagnose(_reference_samples(busy_process_percent=99.0), bench=BENCH)
    assert _codes(findings) == [("host-bound", None)]
    assert "launch/host-bound" in findings[0].message
    assert "VM" not in findings[0].message


def test_reference_case_with_waiting_server_points_outside_it():
    findings = diagnose(_reference_samples(busy_process_percent=3.0), bench=BENCH)
    assert _codes(findings) == [("host-bound", None)]
    assert "mostly wait as well" in findings[0].message
    assert "busiest process p90 3%" in findings[0].message


def test_busy_server_cpu_alone_is_no_evidence_of_load():
    # Real SGLang 0.5.17's scheduler polls at ~100% of a core while the server idles
    # (tests/fixtures/sglang-0.5.17-h200): with no benchmark and no GPU work, that is idle.
    findings = diagnose(_reference_samples(busy_process_percent=100.0))
    assert _codes(findings) == [("idle", None)]


def test_same_series_without_any_sign_of_load_is_idle():
    findings = diagnose(_reference_samples(busy_process_percent=1.0))
    assert _codes(findings) == [("idle", None)]


def test_link_trained_down_to_x8_saturates_at_half_the_rate():
    samples = _reference_samples(None)
    for sample in samples:
        for gpu in sample["gpus"]:
            gpu.update(gpu_util=100, mem_util=2, pcie_rx_kbps=30_000_000)
    x16 = diagnose(samples)
    assert "interconnect-bound" not in [f.code for f in x16]  # 30 GB/s = 48% of 63
    x8 = {i: {"pcie": {"gen_max": 5, "width_current": 8}} for i in range(8)}
    assert {f.code for f in diagnose(samples, x8)} == {"interconnect-bound"}  # 95% of 31.5


@pytest.mark.parametrize(
    ("server", "fires"),
    [
        ({"kv_cache_usage": 0.97, "queued_requests": 12}, True),
        ({"kv_cache_usage": 0.97, "queued_requests": 0}, False),
        ({"kv_cache_usage": 0.5, "queued_requests": 12}, False),
        ({}, False),
        (None, False),
    ],
)
def test_memory_capacity_bound_from_server_numbers(server, fires):
    findings = diagnose(_reference_samples(None), bench=BENCH, server=server)
    capacity = [f for f in findings if f.code == "memory-capacity-bound"]
    assert bool(capacity) == fires
    if fires:
        assert "KV cache 97% full with 12 requests queued" in capacity[0].message


def test_every_threshold_says_why():
    text = files("pyinfra_sglang").joinpath("data", "diagnosis.toml").read_text()
    lines = text.splitlines()
    keys = [i for i, line in enumerate(lines) if re.match(r"^[a-z_]+ = ", line)]
    assert len(keys) == len([v for t in tomllib.loads(text).values() for v in t.values()])
    for i in keys:
        assert lines[i - 1].startswith("#"), f"no comment above {lines[i]!r}"


def test_summary_medians_and_shares(capture):
    summary = summarize_gpu([capture[i] for i in COPY], 0, busy_util_pct=50)
    assert summary.samples == 3 and summary.busy_share == pytest.approx(2 / 3)
    assert summary.pcie_rx_gbs.median == pytest.approx(59.43148)
    assert summary.pcie_busier_gbs.median == pytest.approx(59.623545)
    assert summary.busy_mem_util == 2 and summary.busy_power_w == pytest.approx(122.8)


def test_truncated_last_line_is_dropped_a_broken_middle_one_is_an_error(tmp_path):
    good = json.dumps({"t": 0.2, "gpus": [], "cpu": None})
    path = tmp_path / "samples.jsonl"
    path.write_text(f"{good}\n{good}\n{good[:10]}")
    assert len(read_json_lines(path)) == 2
    path.write_text(f"{good}\n{good[:10]}\n{good}\n")
    with pytest.raises(ValueError, match="line 2"):
        read_json_lines(path)


def test_stream_rate_of_a_bench_row():
    assert stream_rate({"max_concurrency": 64, "median_tpot_ms": 250.0}) == 4.0
    assert stream_rate({"max_concurrency": 1, "output_throughput": 11.0}) == 11.0
    assert stream_rate({"max_concurrency": 8, "output_throughput": 80.0}) is None


def _command(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def results_dir(tmp_path, sampler_run):
    folder = tmp_path / "results"
    folder.mkdir()
    window = sampler_run("d2h")
    folder.joinpath("samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in window))
    links = {
        "gpus": [{"index": 0, "pcie": {"gen_max": 5, "width_current": 16}}],
        "virtualization": {"container": None, "vm": "kvm"},
    }
    folder.joinpath("links.json").write_text(json.dumps(links))
    bench = [
        {
            "max_concurrency": 1,
            "completed": 10,
            "output_throughput": 11.0,
            "median_tpot_ms": 1000 / 11,
        }
    ]
    folder.joinpath("bench.jsonl").write_text(json.dumps(bench[0]) + "\n")
    profile = {
        "profile": "glm-5-nvfp4",
        "gpu": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "tp_size": 8,
    }
    folder.joinpath("profile.json").write_text(json.dumps(profile))
    return folder


def test_diagnose_command_prints_findings_and_roofline(results_dir, capsys):
    code, out, _ = _command(["diagnose", str(results_dir)], capsys)
    assert code == 0
    assert re.search(r"GPU 0: \d\d samples, busy 100%, util 99/100%", out)  # summary line
    assert "[warn] interconnect-bound: GPU 0: PCIe Gen5 x16 ran at" in out
    assert "[warn] idle: GPU 1" in out
    # 8 x 1597 GB/s / (40B x 0.5625 bytes = 22.5 GB) = 568 tok/s; 11 tok/s is 1.9% of it.
    assert "Decode roofline (batch 1): 568 tok/s" in out
    assert "concurrency 1: 11.0 tok/s per stream = 1.9% of the bound" in out


def test_diagnose_command_json(results_dir, capsys):
    code, out, _ = _command(["diagnose", str(results_dir), "--json"], capsys)
    report = json.loads(out)
    assert code == 0
    codes = [f["code"] for f in report["findings"]]
    assert codes == ["interconnect-bound", "idle", "interconnect-estimate"]
    assert report["gpus"][0]["pcie_link"] == "PCIe Gen5 x16"
    assert report["roofline"]["runs"][0]["fraction_of_bound"] == pytest.approx(11 / 568, rel=0.01)


def test_diagnose_command_reads_the_shared_capture_format(tmp_path, capsys):
    (tmp_path / "samples.json").write_text((CAPTURE / "samples.json").read_text())
    code, out, _ = _command(["diagnose", str(tmp_path)], capsys)
    assert code == 0 and "GPU 0: 19 samples" in out


def test_diagnose_command_without_samples_says_so(tmp_path, capsys):
    code, _, err = _command(["diagnose", str(tmp_path)], capsys)
    assert code == 2 and "no samples.jsonl" in err
    code, _, err = _command(["diagnose", str(tmp_path / "missing")], capsys)
    assert code == 2 and "no such folder" in err


def test_incomplete_profile_json_is_named(results_dir, capsys):
    results_dir.joinpath("profile.json").write_text('{"profile": "glm-5-nvfp4"}')
    code, _, err = _command(["diagnose", str(results_dir)], capsys)
    # The GPU comes from the samples (said on a "Read:" line); the GPU count cannot.
    assert code == 2 and "profile.json lacks tp_size" in err


def test_a_profile_named_by_a_path_is_refused_not_read(results_dir, tmp_path, capsys):
    # A profile file outside the profile folders, reachable by a relative path from them.
    from pyinfra_sglang.serving.profiles import builtin_profile_dir

    builtin = Path(str(builtin_profile_dir()))
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.joinpath("stolen.toml").write_text((builtin / "dense-bf16.toml").read_text())
    relative = os.path.relpath(outside / "stolen", builtin)
    for name in (relative, str(outside / "stolen"), "..", ".hidden"):
        profile = {"profile": name, "gpu": "NVIDIA H200", "tp_size": 1}
        results_dir.joinpath("profile.json").write_text(json.dumps(profile))
        code, out, err = _command(["diagnose", str(results_dir)], capsys)
        assert code == 2 and out == "", name
        assert "profile.json: profile is" in err and "not a profile name" in err, err
    # Your own folder of profiles is what profile_dirs is for.
    profile = {"profile": "stolen", "gpu": "NVIDIA H200", "tp_size": 1}
    profile["profile_dirs"] = [str(outside)]
    results_dir.joinpath("profile.json").write_text(json.dumps(profile))
    code, out, _ = _command(["diagnose", str(results_dir)], capsys)
    assert code == 0 and "Decode roofline (batch 1)" in out


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("profile.json", [1, 2], "profile.json is [1, 2], not a JSON object"),
        (
            "samples.jsonl",
            '{"t": 0, "gpus": [{"index": 0, "gpu_util": "busy"}]}\n',
            'sample 1: gpus[0]: gpu_util is "busy", not a number',
        ),
        ("samples.jsonl", '{"t": "0", "gpus": []}\n', 't is "0", not a number'),
        ("links.json", {"gpus": [{"index": "zero"}]}, 'index is "zero", not a GPU index'),
        ("bench.jsonl", '{"max_concurrency": [1]}\n', "line 1: max_concurrency is [1], not a"),
        ("server_metrics.json", {"queued_requests": "12"}, 'queued_requests is "12", not a'),
        (
            "profile.json",
            {"profile": "dense-bf16", "gpu": "NVIDIA H200", "tp_size": 1.5},
            "tp_size is 1.5, not a GPU count",
        ),
    ],
)
def test_wrong_json_types_are_named_not_a_traceback(results_dir, capsys, file, content, message):
    text = content if isinstance(content, str) else json.dumps(content)
    results_dir.joinpath(file).write_text(text)
    code, out, err = _command(["diagnose", str(results_dir)], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("diagnose: ") and message in err, err
