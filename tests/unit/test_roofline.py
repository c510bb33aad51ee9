"""Decode roofline (pyinfra_sglang/serving/roofline.py) and the profiles' model numbers behind
it."""

from __future__ import annotations

import pytest

from pyinfra_sglang.gpus import UnknownGpuError
from pyinfra_sglang.serving.profiles import (
    ProfileError,
    load_profile,
    load_profile_file,
    merge_overrides,
)
from pyinfra_sglang.serving.roofline import DecodeRoofline, roofline_for

REFERENCE_GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_bound_is_aggregate_bandwidth_over_bytes_per_token():
    # 8 x 1597 GB/s = 12776 GB/s; 40B x 0.5625 bytes = 22.5 GB per token.
    assert DecodeRoofline(8, 1597, 40, 0.5625).tokens_per_s == pytest.approx(567.8, abs=0.1)
    # Twice the GPUs, twice the bound; twice the bytes, half.
    assert DecodeRoofline(16, 1597, 40, 0.5625).tokens_per_s == pytest.approx(2 * 567.8, abs=0.2)
    assert DecodeRoofline(8, 1597, 40, 1.125).tokens_per_s == pytest.approx(567.8 / 2, abs=0.1)


def test_reference_deployment_reached_two_percent_of_its_bound():
    roof = roofline_for(load_profile("glm-5-nvfp4"), REFERENCE_GPU, tp_size=8)
    assert roof.aggregate_bandwidth_gbs == 8 * 1597
    assert roof.gb_per_token == pytest.approx(22.5)
    assert roof.tokens_per_s == pytest.approx(567.8, abs=0.1)
    # ~11 tok/s single stream (docs/sources.md, The reference deployment); a community build
    # reached ~51 (9%; docs/sources.md, Published serving numbers).
    assert roof.fraction(11) == pytest.approx(0.0194, abs=0.0005)
    assert roof.fraction(51) == pytest.approx(0.0898, abs=0.0005)


def test_published_h200_fp8_number_is_below_its_bound():
    # 8x H200 GLM-5-FP8 (1 byte/param): 118 tok/s at concurrency 1 (SGLang cookbook).
    roof = DecodeRoofline(
        tp_size=8, memory_bandwidth_gbs=4800, active_params_b=40, bytes_per_param=1
    )
    assert roof.tokens_per_s == 960
    assert 0 < roof.fraction(118) < 1
    assert roof.as_dict()["bound_tokens_per_s"] == 960.0


def test_glm5_profiles_carry_the_same_model_numbers():
    for name in ("glm-5-nvfp4", "glm-5-nvfp4-dense"):
        profile = load_profile(name)
        assert (profile.active_params_b, profile.bytes_per_param) == (40, 0.5625)
    dense = load_profile("dense-bf16")
    assert (dense.active_params_b, dense.bytes_per_param) == (8.2, 2)
    assert roofline_for(dense, "NVIDIA H200", 1).tokens_per_s == pytest.approx(4800 / 16.4)


def test_profile_without_model_numbers_is_refused_by_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('model = "org/m"\nmin_total_gpu_memory_gb = 8\nbytes_per_param = 2\n')
    with pytest.raises(ValueError, match="profile mine has no active_params_b"):
        roofline_for(load_profile_file(path), "NVIDIA H200", 1)


def test_model_numbers_can_be_overridden_and_are_validated():
    overrides = {"active_params_b": 70, "bytes_per_param": 1}
    profile = merge_overrides(load_profile("dense-bf16"), overrides)
    assert roofline_for(profile, "NVIDIA H200", 8).tokens_per_s == pytest.approx(8 * 4800 / 70)
    with pytest.raises(ProfileError, match="active_params_b"):
        merge_overrides(profile, {"active_params_b": -1})


def test_unknown_gpu_or_bad_tp_size_is_refused():
    profile = load_profile("glm-5-nvfp4")
    with pytest.raises(UnknownGpuError, match="no spec for GPU"):
        roofline_for(profile, "NVIDIA Imaginary 9000", 8)
    with pytest.raises(ValueError, match="tensor-parallel size"):
        roofline_for(profile, REFERENCE_GPU, 0)
