"""The GPU-memory fit from the model's size (memory_fit.py), and MTP as a profile option."""

from __future__ import annotations

import pytest

from pyinfra_sglang.serving.memory_fit import (
    GB,
    GIB,
    fewest_holding,
    holds,
    kv_bytes_per_token,
    per_gpu_need,
)
from pyinfra_sglang.serving.placement import GpuFitError, check_fit, profile_for_gpus
from pyinfra_sglang.serving.profiles import (
    ProfileError,
    load_profile,
    load_profile_file,
    merge_overrides,
)
from tests.unit.test_render import placed_args
from tests.unit.test_validate_before_change import SSH_YES, only_problem, validate

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def glm(arch: str = "sm_120", **overrides):
    return profile_for_gpus(merge_overrides(load_profile("glm-5-nvfp4"), overrides), arch, "0.5.23")


def test_glm5_needs_its_real_weights_per_gpu():
    # docs/sources.md, GLM-5-NVFP4 checkpoint: BF16 25,577,755,904 params, U8
    # 364,143,181,824 B, F8_E4M3 45,517,897,728 B, F32 19,456 params: 460.8 GB.
    total = 25_577_755_904 * 2 + 364_143_181_824 + 45_517_897_728 + 19_456 * 4
    assert round(total / GB, 1) == load_profile("glm-5-nvfp4").weights_gb == 460.8
    need = per_gpu_need(glm(), 8, 96)
    # MTP off: the next-token layer (1 of 79) stays on disk.
    assert need.weights_gib == pytest.approx(460.8 * GB / GIB * 78 / 79 / 8)
    # fp8_e4m3 on SM120: 61,464 B per token on every rank (MLA is not split), 131072 tokens.
    assert need.kv_gib == pytest.approx(131072 * 61464 / GIB)
    assert (need.overhead_gib, need.mtp_gib, need.fraction) == (8, 0, 0.92)
    assert need.need == pytest.approx(68.5, abs=0.05) and need.fits
    # The bf16 KV cache of the dense fallback takes more per token.
    dense = profile_for_gpus(load_profile("glm-5-nvfp4-dense"), "sm_120", "0.5.23")
    assert per_gpu_need(dense, 8, 96).kv_gib == pytest.approx(131072 * 100152 / GIB)


def test_the_kv_bytes_follow_the_sparse_backends_layout():
    """SGLang keeps a DSA cache in the raw MLA layout (576 B a layer in fp8) when the prefill
    or the decode backend is trtllm, and adds scales and a bf16 rope part (656 B) with the
    others; the indexer's 132 B a layer come with both (docs/sources.md, SGLang releases,
    read from their wheels). GLM-5's 78 layers: 55,224 B a token on B200, 61,464 on SM120."""
    b200, sm120 = glm("sm_100"), glm("sm_120")
    assert (b200.sparse_attention_decode_backend, sm120.sparse_attention_decode_backend) == (
        "trtllm",
        "flashinfer_sparse_mla",
    )
    assert kv_bytes_per_token(b200) == (576 + 132) * 78 == 55224
    assert kv_bytes_per_token(sm120) == (656 + 132) * 78 == 61464
    assert per_gpu_need(b200, 8, 180).kv_gib == pytest.approx(131072 * 55224 / GIB)
    # trtllm on one side only is the trtllm layout too; bf16 is the same with any backend.
    one_side = merge_overrides(b200, {"sparse_attention_prefill_backend": "flashmla_sparse"})
    assert kv_bytes_per_token(one_side) == 55224
    assert kv_bytes_per_token(glm("sm_100", kv_cache_dtype="bf16")) == 100152
    # Not resolved for an architecture (no backends, no KV dtype named): the default table's
    # largest, an upper bound.
    assert kv_bytes_per_token(load_profile("glm-5-nvfp4")) == 100152


def test_kv_bytes_by_backend_need_the_default_table(tmp_path):
    path = tmp_path / "kv.toml"
    path.write_text(
        'model = "o/m"\nweights_gb = 10\nnum_layers = 2\n'
        "kv_bytes_per_token_by_backend = { trtllm = { fp8_e4m3 = 100 } }\n"
    )
    with pytest.raises(ProfileError, match="kv_bytes_per_token_by_backend is set but"):
        load_profile_file(path)


@pytest.mark.parametrize(
    ("gpus", "memory_gb", "fits"),
    [(8, 96, True), (6, 96, True), (5, 96, False), (4, 96, False), (4, 180, True), (2, 180, False)],
)
def test_the_fit_is_per_gpu_at_the_tensor_parallel_size(gpus, memory_gb, fits):
    assert holds(glm("sm_100"), gpus, memory_gb) is fits


def test_the_refusal_names_the_numbers_and_what_fits():
    with pytest.raises(GpuFitError) as error:
        check_fit(glm(), 4, 96)
    message = str(error.value)
    assert "does not fit 4 x 96 GB at tensor-parallel size 4: each GPU needs 121.4 GiB" in message
    assert "weights 105.9 (460.8 GB less the MTP layer / 4)" in message
    assert "KV cache for 131072 tokens 7.5 + overhead 8.0" in message
    assert "mem_fraction_static 0.92 x 96 GB = 88.3 GiB" in message
    assert "Use 8 GPUs of 96 GB" in message


def test_a_smaller_mem_fraction_or_more_tokens_needs_more_gpus():
    assert fewest_holding(glm(), 96) == 6
    # 0.6 x 96 GB leaves 57.6 GiB per GPU: 8 no longer do.
    assert not holds(glm(mem_fraction_static=0.6), 8, 96)
    assert fewest_holding(glm(min_kv_tokens=300_000), 96) == 7
    # MLA's KV cache is whole on every rank: more GPUs shrink only the weights' share.
    assert fewest_holding(glm(min_kv_tokens=1_000_000), 96) == 19


def test_mtp_costs_its_layer_its_kv_and_draft_graphs():
    off, on = per_gpu_need(glm(), 8, 96), per_gpu_need(glm(mtp=True), 8, 96)
    # The whole checkpoint is loaded, the MTP layer's KV (1/78 of the target's) is kept for
    # the same tokens, and 2 GiB of draft graphs (data/memory_fit.toml).
    assert on.weights_gib == pytest.approx(off.weights_gib * 79 / 78)
    assert on.mtp_gib == pytest.approx(off.kv_gib / 78 + 2)
    assert on.need > off.need and on.fits
    assert "MTP draft KV and graphs 2.1" in on.text() and "less the MTP layer" not in on.text()
    # A profile that fits without MTP but not with it is refused with it on.
    tight = {"mem_fraction_static": round(off.need / 96 + 0.001, 3)}
    assert holds(glm(**tight), 8, 96)
    assert not holds(glm(**tight, mtp=True), 8, 96)


def test_mtp_renders_the_speculative_flags_and_is_off_by_default():
    argv = placed_args(glm(mtp=True), "0.5.23", 8, "127.0.0.1", 30000, None)
    at = argv.index("--speculative-algorithm")
    assert argv[at : at + 8] == [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    steps = placed_args(glm(mtp=True, mtp_num_steps=2), "0.5.23", 8, "127.0.0.1", 30000, None)
    assert steps[steps.index("--speculative-num-steps") + 1] == "2"
    assert steps[steps.index("--speculative-num-draft-tokens") + 1] == "3"
    plain = placed_args(glm(), "0.5.23", 8, "127.0.0.1", 30000, None)
    assert not [word for word in plain if word.startswith("--speculative")]


def test_mtp_without_an_mtp_layer_is_refused():
    with pytest.raises(ProfileError, match=r"mtp is true but model Qwen/Qwen3-8B has no MTP"):
        merge_overrides(load_profile("dense-bf16"), {"mtp": True})
    with pytest.raises(ProfileError, match="no MTP"):
        merge_overrides(load_profile("glm-5-nvfp4"), {"mtp": True, "mtp_layers": 0})


def test_the_inventory_refusal_names_host_field_and_what_is_allowed(tmp_path):
    for folder in "abc":
        (tmp_path / folder).mkdir()
    data = {**SSH_YES, "sglang_model_profile": "dense-bf16"}
    mtp = {**data, "sglang_profile_overrides": {"mtp": True}}
    problem = only_problem(tmp_path / "a", {"gpu1": mtp})
    assert (problem.host, problem.field) == ("gpu1", "sglang_profile_overrides")
    assert "no MTP (next-token) layer (mtp_layers = 0)" in problem.message
    assert "allowed: mtp = false" in problem.message
    # The fit: 4 RTX PRO 6000 cannot hold GLM-5, and the refusal gives the numbers.
    glm_host = {**SSH_YES, "sglang_model_profile": "glm-5-nvfp4", "expected_gpu_model": RTX}
    problem = only_problem(tmp_path / "b", {"gpu1": {**glm_host, "expected_gpu_count": 4}})
    assert (problem.host, problem.field, problem.value) == ("gpu1", "expected_gpu_count", "4")
    assert "each GPU needs 121.4 GiB" in problem.message
    # With MTP on, 8 of them still hold it.
    mtp = {**glm_host, "expected_gpu_count": 8, "sglang_profile_overrides": {"mtp": True}}
    assert validate(tmp_path / "c", {"gpu1": mtp})[1] == []


def test_a_profile_with_a_plain_floor_still_works(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('model = "org/tiny"\nmin_total_gpu_memory_gb = 40\n')
    tiny = load_profile_file(path)
    assert per_gpu_need(tiny, 2, 24) is None
    assert holds(tiny, 2, 24) and not holds(tiny, 1, 24)
    with pytest.raises(GpuFitError, match=r"needs at least 40 GB .*min_total_gpu_memory_gb"):
        check_fit(tiny, 1, 24)
    # A built-in profile's size cannot be mixed with a plain floor.
    with pytest.raises(ProfileError, match="both set"):
        merge_overrides(load_profile("dense-bf16"), {"min_total_gpu_memory_gb": 24})
    floor = {"min_total_gpu_memory_gb": 24, "weights_gb": None}
    assert merge_overrides(load_profile("dense-bf16"), floor).weights_gb is None


# --- MoE layouts (issue 28): EP splits experts by expert, DP attention replicates the rest


def test_expert_parallelism_holds_the_same_bytes_per_gpu():
    tp, ep = per_gpu_need(glm(), 8, 96), per_gpu_need(glm(ep_size=8), 8, 96)
    assert ep.weights_gib == pytest.approx(tp.weights_gib)
    assert ep.need == pytest.approx(tp.need)


def test_dp_attention_keeps_attention_and_embeddings_whole_per_group():
    # 429.1 GB of MLPs over 8 GPUs, the other 31.7 GB over 8 / dp GPUs, all less the MTP
    # layer's 1/79 (MTP off).
    scale = GB / GIB * 78 / 79
    for dp, attn_tp in ((2, 4), (4, 2), (8, 1)):
        need = per_gpu_need(glm(dp_attention_size=dp), 8, 96)
        expected = (429.1 / 8 + (460.8 - 429.1) / attn_tp) * scale
        assert need.weights_gib == pytest.approx(expected)
        assert f"the rest 31.7 GB / {attn_tp}" in need.parts()
    # 8 groups of 1: 50.9 + 30.9 = 81.8 GiB of weights, + 7.5 KV + 8: more than 0.92 x 96.
    assert not per_gpu_need(glm(dp_attention_size=8), 8, 96).fits
    assert per_gpu_need(glm(dp_attention_size=2), 8, 96).fits
    assert not holds(glm(dp_attention_size=8), 8, 96)
    # A GPU count the groups do not divide is no layout at all.
    assert not holds(glm(dp_attention_size=4), 6, 180)


def test_dp_attention_without_the_mlp_part_counts_every_weight_as_replicated():
    whole = glm(dp_attention_size=2, mlp_weights_gb=None)
    need = per_gpu_need(whole, 8, 96)
    assert need.weights_gib == pytest.approx(460.8 * GB / GIB * 78 / 79 / 4)
    assert "all 460.8 GB / 4" in need.parts()


def test_dp_attention_that_does_not_fit_is_refused_with_the_numbers():
    with pytest.raises(GpuFitError, match=r"with 8 DP-attention groups: each GPU needs"):
        check_fit(glm(dp_attention_size=8), 8, 96)
