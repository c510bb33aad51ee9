"""The diagnosis's interconnect estimate (diagnosis/layouts.py): the reference case's
question, "would another layout be faster here?", answered from a run's measured rate."""

from __future__ import annotations

import pytest

from pyinfra_sglang.diagnosis.diagnose import ResultsError, _layout_finding
from pyinfra_sglang.diagnosis.layouts import layout_finding
from pyinfra_sglang.gpus import all_gpus
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GLM5 = load_profile("glm-5-nvfp4")
TP8_BYTES = 78 * 2 * 2 * 7 / 8 * 6144 * 2  # tests/unit/test_parallelism.py: 3,354,624 B


def finding(profile=GLM5, rate=225.0, facts=None):
    bench = [{"max_concurrency": 64, "output_throughput": rate}]
    return layout_finding(profile, 8, all_gpus()[RTX], bench, facts or {}, 0.7)


def test_the_reference_run_was_not_bandwidth_bound():
    # 225 tok/s x 3,354,624 B = 0.755 GB/s per GPU: 2.7% of the 28 GB/s PCIe all-reduce.
    found = finding()
    assert (found.level, found.code) == ("ok", "interconnect-estimate")
    assert found.evidence["link_share"] == pytest.approx(225 * TP8_BYTES / 28e9, rel=1e-5)
    assert "0.755 GB/s, 2.7% of the link's 28 GB/s" in found.message
    latency = "bandwidth did not limit this load; their latency might (156 collectives"
    assert latency in found.message
    # DP attention over all 8 does not fit 96 GB GPUs; in 4 groups of 2 it does, and moves
    # 1,916,928 B: 43% less.
    assert "TP8 + DP-attention 4 would move the least: 1.92 MB (43% less)" in found.message
    assert found.evidence["least_traffic_bytes"] == 1916928


def test_a_rate_near_the_links_bandwidth_is_interconnect_bound():
    # 7,000 tok/s x 3.35 MB = 23.5 GB/s: 84% of 28 GB/s.
    found = finding(rate=7000)
    assert found.level == "warn"
    assert "interconnect-bound by the estimate" in found.message


def test_the_layout_served_is_the_one_judged():
    found = finding(merge_overrides(GLM5, {"dp_attention_size": 4}))
    assert found.evidence["layout"] == "TP8 + DP-attention 4"
    assert "no layout that fits would move less" in found.message


def test_a_reported_nvlink_rate_is_used():
    found = finding(facts={0: {"nvlink_gbs": 450.0}})
    assert found.evidence["link_gbs"] == 450.0


def test_nothing_without_shape_rate_or_gpus():
    assert finding(load_profile("dense-bf16")) is None
    assert finding(rate=0) is None
    assert layout_finding(GLM5, 1, all_gpus()[RTX], [{"output_throughput": 9}], {}, 0.7) is None


def test_profile_json_names_the_layout_served():
    results = {
        "profile": {"profile": "glm-5-nvfp4", "gpu": RTX, "tp_size": 8, "ep_size": 8},
        "bench": [{"max_concurrency": 64, "output_throughput": 225.0}],
        "gpu_facts": {},
    }
    assert _layout_finding(results).evidence["layout"] == "TP8 + EP8"
    results["profile"]["ep_size"] = 3
    with pytest.raises(ResultsError, match=r"(?s)profile.json: .*ep_size 3 does not divide"):
        _layout_finding(results)
    # The numbers-only form names no profile: no estimate.
    assert _layout_finding({**results, "profile": {"tp_size": 8}}) is None


def test_the_benchs_profile_json_carries_the_layout_to_the_estimate():
    from pyinfra_sglang.served_benchmark.results import profile_document
    from pyinfra_sglang.serving.placement import GpuSet, place

    served = merge_overrides(GLM5, {"ep_size": 8, "dp_attention_size": 2})
    gpus = GpuSet(count=8, memory_gb=96, arch="sm_120", pcie_only=True)
    placement = place(served, gpus, sglang_version="0.5.23")
    document = profile_document(placement, [{"name": RTX}])
    assert (document["ep_size"], document["dp_attention_size"]) == (8, 2)
    results = {
        "profile": document,
        "bench": [{"max_concurrency": 64, "output_throughput": 225.0}],
        "gpu_facts": {},
    }
    assert _layout_finding(results).evidence["layout"] == "TP8 + EP8 + DP-attention 2"
    # A profile of the user's own folders is not known to the diagnosis: no estimate.
    assert _layout_finding({**results, "profile": {**document, "model_profile": "mine"}}) is None
