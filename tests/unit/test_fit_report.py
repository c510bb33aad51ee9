"""The fit report's KV tokens against real SGLang 0.5.17: the servers captured on one H200
(tests/fixtures/sglang-0.5.17-h200, the device kit's Llama-3-8B shape with dummy weights)
logged the mem_fraction_static they ran with and the KV pool they allocated
(max_total_num_tokens). The same model sized from Llama-3.1-8B's real config.json (the same
shape: 32 layers, 8 KV heads of 128, 4096 hidden, 14336 MLP, 128256 vocab) at that fraction
predicts the pool within 2%."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pyinfra_sglang.gpus import gpu_by_name
from pyinfra_sglang.model_shape.profile_values import profile_values
from pyinfra_sglang.model_shape.shape import shape_of
from pyinfra_sglang.serving.fit_report import fit_report
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNS = FIXTURES / "sglang-0.5.17-h200"


def logged(run: str, key: str) -> float:
    text = (RUNS / run / "server.log").read_text()
    return float(re.search(rf"{key}=([0-9.]+)", text).group(1))


@pytest.mark.parametrize("run", ["graphs-on", "graphs-off", "capped", "kv-starved"])
def test_the_kv_tokens_predicted_are_the_real_servers_pool(run):
    config = json.loads(
        (FIXTURES / "model-configs/meta-llama--Llama-3.1-8B/config.json").read_text()
    )
    fraction = logged(run, "mem_fraction_static")
    values = {**profile_values(shape_of(config)), "mem_fraction_static": fraction}
    profile = merge_overrides(load_profile("dense-bf16"), {"model": "m", **values})
    report = fit_report(profile, 1, float(gpu_by_name("NVIDIA H200").memory_gb))
    real = logged(run, "max_total_num_tokens")
    assert report.kv_tokens == pytest.approx(real, rel=0.02), (report.kv_tokens, real)
