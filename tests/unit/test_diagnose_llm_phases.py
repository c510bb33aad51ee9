"""The bottleneck rules replayed on LLM-shaped phases captured on a real H200 by the product's
own sampler (tests/fixtures/gpu/h200-llm-phases-sampler: its README has how each phase was made
and what bound it). Each phase's window must come out as what bound it there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.diagnosis.bottlenecks import diagnose, thresholds
from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.serving.roofline import DecodeRoofline

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200-llm-phases-sampler"
CAPTURED = json.loads((RUN / "phases.json").read_text())
PHASES, FACTS = CAPTURED["phases"], CAPTURED["facts"]
SAMPLES = read_json_lines(RUN / "samples.jsonl")


def window(phase: str) -> list[dict]:
    # Skip the first 0.3 s of a phase: NVML's utilization lags its start.
    start, end = PHASES[phase]["start"], PHASES[phase]["end"]
    return [s for s in SAMPLES if start + 0.3 <= s["time"] < end]


def codes(findings) -> list[tuple[str, int | None]]:
    return [(f.code, f.gpu) for f in findings]


def decode_batch_roofline() -> tuple[DecodeRoofline, list[dict]]:
    """The batch-64 decode as a profile and a bench row would give it: the stack's 3.49B bf16
    parameters on one H200, and one step per token of each stream (227 steps/s)."""
    roofline = DecodeRoofline(
        tp_size=1,
        memory_bandwidth_gbs=4800,
        active_params_b=FACTS["stack_params"] / 1e9,
        bytes_per_param=2,
    )
    phase = PHASES["decode_batch"]
    bench = [
        {
            "max_concurrency": FACTS["decode_batch"],
            "completed": phase["steps"],
            "output_throughput": phase["tokens_per_s"],
            "median_tpot_ms": 1000 / phase["steps_per_s"],
        }
    ]
    return roofline, bench


def test_every_phase_has_enough_samples():
    for phase in PHASES:
        assert len(window(phase)) >= 35, phase


@pytest.mark.parametrize("phase", ["idle", "idle2"])
def test_idle_is_idle(phase):
    findings = diagnose(window(phase))
    assert codes(findings) == [("idle", None)]


def test_batch1_decode_is_host_bound_with_a_pegged_core():
    # GPT-2 small, eager, batch 1: 21 tok/s, GPU util 2%, its one thread at 100% of a core.
    # The load is known from its rate: a pegged core alone is no sign of load (real SGLang's
    # scheduler polls at 100% of a core while idle).
    rate = [{"completed": 1, "output_throughput": 21.0, "max_concurrency": 1}]
    findings = diagnose(window("decode_b1"), bench=rate)
    assert codes(findings) == [("host-bound", None)]
    message = findings[0].message
    assert "launch/host-bound" in message
    assert "busiest process p90 100%" in message


def test_large_batch_decode_is_memory_bandwidth_bound_not_compute():
    findings = diagnose(window("decode_batch"))
    assert codes(findings) == [("memory-bandwidth-bound", 0)]
    finding = findings[0]
    assert finding.level == "ok"
    message = finding.message
    assert "memory utilization 73%" in message
    assert "SM clock at 1980 MHz = 100% of its 1980 MHz max" in message
    assert re.search(r"power 54\d W = 78% of the 700 W limit", message)
    for advice in ("larger batches", "quantized weights and KV cache", "speculative decoding"):
        assert advice in message
    assert "Decode roofline" not in message  # no profile given


def test_large_batch_decode_names_its_roofline_share():
    roofline, bench = decode_batch_roofline()
    findings = diagnose(window("decode_batch"), bench=bench, roofline=roofline)
    finding = findings[0]
    assert finding.code == "memory-bandwidth-bound"
    # 4800 GB/s / 6.98 GB = 688 tok/s per stream; the decode's 227 steps/s is 33% of it.
    assert "Decode roofline: 688 tok/s per stream (6.98 GB of weights per token" in finding.message
    assert "concurrency 64: 227.0 tok/s per stream = 33%" in finding.message
    runs = finding.evidence["roofline"]["runs"]
    assert runs == [{"max_concurrency": 64, "fraction_of_bound": pytest.approx(0.3301, abs=1e-3)}]


def test_hbm_copy_is_memory_bandwidth_bound():
    findings = diagnose(window("hbm_copy"))
    assert codes(findings) == [("memory-bandwidth-bound", 0)]
    assert "memory utilization 100%" in findings[0].message


def test_prefill_is_compute_bound():
    findings = diagnose(window("prefill"))
    assert codes(findings) == [("compute-bound", 0)]
    message = findings[0].message
    assert re.search(r"power 68\d W = 98% of the 700 W limit", message)
    assert "SM clock pulled down to 1740 MHz = 88%" in message


def test_same_decode_with_its_clock_pulled_down_is_compute():
    # A GPU Boost that met the power limit lowers the SM clock: with the decode's clock read
    # against a 2200 MHz max (1980 = 90%, under the 92% of an unthrottled clock), the memory
    # no longer explains it and the power-limited arithmetic does.
    findings = diagnose(window("decode_batch"), {0: {"sm_clock_max_mhz": 2200}})
    assert codes(findings) != [("memory-bandwidth-bound", 0)]
    assert ("memory-bandwidth-bound", 0) not in codes(findings)


def test_memory_bound_needs_power_and_clock_limits():
    # Without the limits nothing tells a busy memory from a power-limited load: not guessed.
    stripped = [
        {
            **s,
            "gpus": [
                {k: v for k, v in g.items() if k not in ("power_limit_w", "sm_clock_max_mhz")}
                for g in s["gpus"]
            ],
        }
        for s in window("decode_batch")
    ]
    findings = diagnose(stripped)
    assert "memory-bandwidth-bound" not in [f.code for f in findings]


def test_weights_streamed_from_host_are_pcie_bound():
    findings = diagnose(window("host_stream"))
    assert codes(findings) == [("interconnect-bound", 0)]
    link = findings[0].evidence["links"]["PCIe Gen5 x16"]
    assert link["saturated_share"] == 1.0
    assert "PCIe Gen5 x16 ran at >= 70%" in findings[0].message


def test_alternating_pcie_copies_are_interconnect_bound_by_both_directions():
    findings = diagnose(window("pcie_alt"))
    assert codes(findings) == [("interconnect-bound", 0)]
    link = findings[0].evidence["links"]["PCIe Gen5 x16"]
    # Neither direction alone saturates the link: the busier-direction rule does not fire.
    assert link["saturated_share"] < thresholds().link.share
    assert link["busier_p90_gbs"] / link["capacity_gbs"] < 0.6
    message = findings[0].message
    assert "two directions together carried >= 70%" in message
    assert "copies taking turns" in message


def _nvlink_sample(t: float, tx_kib: int, rx_kib: int) -> dict:
    """A GPU at rest but for NVLink counters (KiB, cumulative), as the sampler records them."""
    gpu = {
        "index": 0,
        "name": "NVIDIA H200",
        "gpu_util": 99,
        "mem_util": 11,
        "pcie_tx_kbps": 600,
        "pcie_rx_kbps": 500,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "power_w": 200.0,
        "power_limit_w": 700.0,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "nvlink_links": 18,
        "nvlink_raw": {
            "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": tx_kib,
            "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": rx_kib,
        },
    }
    return {"t": t, "gpus": [gpu], "cpu": None}


def test_nvlink_copies_taking_turns_are_interconnect_bound():
    # Synthetic, in the readings of the real 2x H200 NVLink copy (util 99%, memory util 11%,
    # 200 W, 1980 MHz): per 0.1 s, 19 GB one way then 19 GB back within it, i.e. ~190 GB/s
    # each direction (0.42 of 450), ~380 GB/s together.
    step = int(19e9 / 1024)
    samples, tx, rx = [], 0, 0
    for i in range(40):
        samples.append(_nvlink_sample(i * 0.1, tx, rx))
        tx, rx = tx + step, rx + step
    findings = diagnose(samples)
    assert codes(findings) == [("interconnect-bound", 0)]
    assert "NVLink's two directions together" in findings[0].message


def test_diagnose_command_names_the_roofline_share_in_the_finding(tmp_path, capsys):
    roofline, bench = decode_batch_roofline()
    (tmp_path / "samples.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in window("decode_batch"))
    )
    (tmp_path / "bench.jsonl").write_text(json.dumps(bench[0]) + "\n")
    profile = {
        "tp_size": 1,
        "memory_bandwidth_gbs": 4800,
        "active_params_b": roofline.active_params_b,
        "bytes_per_param": 2,
    }
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    assert main(["diagnose", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[ok] memory-bandwidth-bound: GPU 0: memory utilization 73%" in out
    assert "concurrency 64: 227.0 tok/s per stream = 33%" in out
    assert "Decode roofline (batch 1): 688 tok/s" in out
