"""MoE layouts (pyinfra_sglang/serving/parallelism.py): SGLang's checks, and the interconnect
estimate against calculations done by hand here."""

from __future__ import annotations

import pytest

from pyinfra_sglang.gpus import all_gpus
from pyinfra_sglang.serving import parallelism
from pyinfra_sglang.serving.layout import Layout
from pyinfra_sglang.serving.parallelism import layout_problems, traffic
from pyinfra_sglang.serving.profiles import ProfileError, load_profile, merge_overrides
from pyinfra_sglang.versions import parse_version

GLM5 = load_profile("glm-5-nvfp4")


def glm5(**overrides):
    return merge_overrides(GLM5, overrides)


# --- the estimate, by hand -----------------------------------------------------------------

# GLM-5: hidden 6144, 78 layers (3 dense, 75 MoE), 256 routed experts, 8 per token; bf16.
H_BYTES = 6144 * 2  # one token's hidden state on the wire
ALL_REDUCE_8 = 2 * 7 / 8 * H_BYTES  # ring all-reduce over 8 GPUs: 21,504 B per token


def test_tp8_moves_two_all_reduces_per_layer():
    t = traffic(GLM5, Layout(8))
    assert ALL_REDUCE_8 == 21504
    assert t.total_bytes == pytest.approx(78 * 2 * 21504)  # 3,354,624 B
    assert t.collectives == 156
    # 3,354,624 B at 28 GB/s: 119.8 us per token, 8,347 tokens/s.
    assert t.seconds_per_token(28) == pytest.approx(3354624 / 28e9)
    assert t.seconds_per_token(28) * 1e6 == pytest.approx(119.808)
    assert t.ceiling(28) == pytest.approx(8346.6, abs=0.1)


def test_expert_parallelism_without_an_all_to_all_moves_what_tp_moves():
    assert traffic(GLM5, Layout(8, ep=8)).total_bytes == traffic(GLM5, Layout(8)).total_bytes


def test_dp_attention_over_all_gpus_drops_the_attention_all_reduce():
    t = traffic(GLM5, Layout(8, dp=8))
    assert t.attention_bytes == 0
    # The MLP side: a DP gather and a scatter, (7/8) x 12,288 B each, on all 78 layers.
    assert t.total_bytes == pytest.approx(78 * 21504)  # 1,677,312 B
    assert t.collectives == 156


def test_dp_attention_in_groups_of_four():
    # 2 groups of 4: the all-reduce of each group, 2 x 3/4 x 12,288 per token of the group,
    # half the tokens each: 9,216 B per token of the server per layer.
    t = traffic(GLM5, Layout(8, dp=2))
    assert t.attention_bytes == pytest.approx(78 * 2 * 3 / 4 * H_BYTES / 2) == 78 * 9216
    assert t.total_bytes == pytest.approx(78 * 9216 + 78 * 21504)
    assert t.collectives == 78 + 2 * 78


def test_ep8_dp8_all_to_all_by_hand():
    # P(a given rank holds none of a token's 8 experts): 224 of 256 experts are elsewhere,
    # picked 8 without repeats.
    p_none = 1.0
    for i in range(8):
        p_none *= (224 - i) / (256 - i)
    assert p_none == pytest.approx(0.33817, abs=1e-5)
    remote = 7 * (1 - p_none)  # 4.633 other ranks per token
    # Dispatch and combine, bf16, tokens spread over the 8 ranks: 2 x r x 12,288 / 8 per MoE
    # layer; the 3 dense layers keep their gather and scatter.
    expected = 75 * 2 * remote * H_BYTES / 8 + 3 * 21504
    t = traffic(GLM5, Layout(8, ep=8, dp=8, a2a="deepep"))
    assert t.remote_ranks == pytest.approx(remote)
    assert t.total_bytes == pytest.approx(expected)
    assert expected == pytest.approx(1_131_913, abs=1)
    assert t.ceiling(28) == pytest.approx(28e9 / expected)
    assert t.collectives == 3 * 2 + 75 * 2


def test_small_model_by_hand():
    # 2 MoE layers, hidden 1000, 4 experts, 2 per token, 2 GPUs: a rank holds 2 experts;
    # P(none of a token's 2 on the other rank) = C(2,2)/C(4,2) = 1/6.
    tiny = merge_overrides(
        load_profile("dense-bf16"),
        {
            "hidden_size": 1000,
            "num_layers": 2,
            "num_routed_experts": 4,
            "num_experts_per_token": 2,
        },
    )
    t = traffic(tiny, Layout(2, ep=2, dp=2, a2a="deepep"))
    assert t.remote_ranks == pytest.approx(5 / 6)
    assert t.total_bytes == pytest.approx(2 * 2 * (5 / 6) * 2000 / 2)
    # TP2: two all-reduces of 2 x 1/2 x 2,000 B per layer.
    assert traffic(tiny, Layout(2)).total_bytes == pytest.approx(2 * 2 * 2000)


def test_link_figures():
    rtx = all_gpus()["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    h200 = all_gpus()["NVIDIA H200"]
    assert parallelism.link_for(rtx, False, 8).busbw_gbs == 28  # measured, PCIe only
    assert parallelism.link_for(h200, True, 8).busbw_gbs == 28  # NVLink not connected
    assert parallelism.link_for(h200, False, 8).busbw_gbs == h200.nvlink_bandwidth_gbs / 2
    assert parallelism.link_for(h200, False, 1) is None


def test_estimate_lines_mark_the_layout_and_what_does_not_fit():
    lines = parallelism.estimate_lines(GLM5, 8, parallelism.Link(28, "test"), 96)
    assert "link 28 GB/s" in lines[0]
    chosen = [line for line in lines if line.startswith(" * ")]
    assert len(chosen) == 1 and "TP8 " in chosen[0] and "ceiling 8,347 tok/s" in chosen[0]
    dp8 = next(line for line in lines if "TP8 + DP-attention 8 " in line)
    # The attention and embeddings (31.7 GB) whole on every GPU: more than 0.92 x 96 GiB.
    assert "does not fit" in dp8
    dp2 = next(line for line in lines if "TP8 + DP-attention 2 " in line)
    assert "does not fit" not in dp2
    assert "bandwidth only" in lines[-1]


def test_estimate_needs_the_shape():
    lines = parallelism.estimate_lines(load_profile("dense-bf16"), 2, None)
    assert lines == ["interconnect estimate: none (the profile leaves hidden_size unset)"]


# --- what SGLang refuses ------------------------------------------------------------------


def test_ep_size_must_divide_the_experts():
    with pytest.raises(ProfileError, match=r"ep_size 3 does not divide the model's 256 routed"):
        glm5(ep_size=3)


def test_layouts_need_an_moe_model():
    with pytest.raises(ProfileError, match="need a mixture-of-experts model"):
        merge_overrides(load_profile("dense-bf16"), {"dp_attention_size": 2})


def test_all_to_all_needs_ep_over_all_ranks():
    with pytest.raises(ProfileError, match="needs expert parallelism"):
        glm5(moe_a2a_backend="deepep")
    problems = layout_problems(glm5(ep_size=4, moe_a2a_backend="deepep"), 8, "0.5.23", "sm_100")
    assert any("set ep_size 8" in p for p in problems)


def test_dp_size_must_divide_tp():
    problems = layout_problems(glm5(dp_attention_size=4), 6, "0.5.23")
    assert problems == [
        "dp_attention_size 4 does not divide tensor-parallel size 6 (SGLang: tp_size must "
        "be divisible by the DP size); allowed: 1, 2, 3, 6"
    ]
    with pytest.raises(ProfileError, match="dp_attention_size 3 does not divide"):
        glm5(tp_size=8, dp_attention_size=3)


def test_ep_size_must_divide_tp():
    problems = layout_problems(glm5(ep_size=16), 8, "0.5.23")
    assert "allowed at tp_size 8: 1, 2, 4, 8" in problems[0]


def test_fp4_moe_on_sm120_takes_ep_over_all_ranks_or_none():
    profile = glm5(ep_size=4)
    assert layout_problems(profile, 8, "0.5.23", "sm_100") == []
    (problem,) = layout_problems(profile, 8, "0.5.23", "sm_120")
    assert "allowed: 1 or 8" in problem
    assert layout_problems(glm5(ep_size=8), 8, "0.5.23", "sm_120") == []


@pytest.mark.parametrize(
    ("version", "allowed"),
    [("0.5.9", False), ("0.5.13", False), ("0.5.17", True), ("0.5.23", True)],
)
def test_all_to_all_choices_per_release(version, allowed):
    profile = glm5(ep_size=8, moe_a2a_backend="pplx")
    problems = layout_problems(profile, 8, version, "sm_100")
    assert (problems == []) is allowed
    if not allowed:
        assert "not an NVIDIA all-to-all of SGLang" in problems[0]


# The first release whose parser takes each NVIDIA --moe-a2a-backend choice, read in every
# wheel 0.5.5 .. 0.5.23 (docs/sources.md, SGLang releases, read from their wheels).
FIRST_RELEASE = {
    "deepep": "0.5.5",
    "mooncake": "0.5.5",
    "flashinfer": "0.5.9",
    "nixl": "0.5.10",
    "megamoe": "0.5.12",
    "pplx": "0.5.17",
    "deepep_v2": "0.5.19",
    "flashinfer_megamoe": "0.5.20",
}
RELEASES = [f"0.5.{n}" for n in range(5, 24)]


@pytest.mark.parametrize("backend", sorted(FIRST_RELEASE))
def test_each_all_to_all_is_taken_from_its_first_release_on(backend):
    first = parse_version(FIRST_RELEASE[backend])
    for release in RELEASES:
        taken = backend in parallelism.a2a_backends(release)
        assert taken is (parse_version(release) >= first), (backend, release)


@pytest.mark.parametrize(
    ("backend", "release", "before"),
    [
        ("nixl", "0.5.10", "0.5.9"),
        ("megamoe", "0.5.12", "0.5.11"),
        ("deepep_v2", "0.5.19", "0.5.18"),
        ("flashinfer_megamoe", "0.5.20", "0.5.19"),
        ("flashinfer_megamoe", "0.5.22", "0.5.19"),
    ],
)
def test_a_layout_with_an_all_to_all_of_its_release_is_not_refused(backend, release, before):
    # Refused before, when the data named later first releases (0.5.14, 0.5.23).
    profile = glm5(ep_size=8, moe_a2a_backend=backend)
    assert layout_problems(profile, 8, release, "sm_100") == []
    (problem,) = layout_problems(profile, 8, before, "sm_100")
    assert "not an NVIDIA all-to-all of SGLang" in problem


def test_the_nvidia_choices_of_the_newest_release():
    assert parallelism.a2a_backends("0.5.23") == [
        "none",
        "deepep",
        "mooncake",
        "nixl",
        "flashinfer",
        "megamoe",
        "deepep_v2",
        "pplx",
        "flashinfer_megamoe",
    ]
    assert parallelism.a2a_backends("0.5.4") == []


def test_other_hardwares_all_to_all_is_refused():
    assert "mori" not in parallelism.a2a_backends("0.5.23")
    assert "deepep" in parallelism.a2a_backends("0.5.9")


def test_one_gpu_crosses_no_link_whatever_the_shape():
    for name in ("dense-bf16", "glm-5-nvfp4"):
        lines = parallelism.estimate_lines(load_profile(name), 1, None)
        assert lines == ["interconnect estimate: one GPU, nothing crosses a link"]


def test_divisors_are_found_in_square_root_time():
    """Issue 35 N8: counted one by one, 10^12 took hours."""
    from pyinfra_sglang.serving.layout import divisors as _divisors

    assert _divisors(12) == [1, 2, 3, 4, 6, 12]
    assert _divisors(1) == [1]
    assert len(_divisors(10**12)) == 169 and _divisors(10**12)[-1] == 10**12
