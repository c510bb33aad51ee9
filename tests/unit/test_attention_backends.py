"""Sparse-attention backends against the GPUs and the SGLang release
(data/attention_backends.toml): triton_sparse_mla, SM120's alternative DSA prefill from
SGLang 0.5.22."""

from __future__ import annotations

from pyinfra_sglang.serving.attention_backends import backend_problems, sparse_backends
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides


def glm5_on(arch: str):
    return load_profile("glm-5-nvfp4").for_arch(arch)


def test_triton_sparse_mla_is_an_sm120_prefill_backend_from_0_5_22():
    support = sparse_backends()["triton_sparse_mla"]
    assert support.since == "0.5.22" and support.phases == ("prefill",)
    assert {"sm_120", "sm_121"} <= set(support.archs)
    resolved = glm5_on("sm_120")
    assert resolved.sparse_attention_decode_backend == "flashinfer_sparse_mla"
    triton = merge_overrides(resolved, {"sparse_attention_prefill_backend": "triton_sparse_mla"})
    assert backend_problems(triton, "sm_120", "0.5.22") == []
    assert backend_problems(triton, "sm_120", "0.5.23") == []
    # 0.5.21's parser has no such choice, and its SM120 check takes flashinfer_sparse_mla only.
    assert backend_problems(triton, "sm_120", "0.5.21") == [
        "sparse_attention_prefill_backend 'triton_sparse_mla' exists from SGLang 0.5.22 on"
    ]


def test_triton_sparse_mla_is_refused_as_the_decode_backend():
    resolved = glm5_on("sm_120")
    decode = merge_overrides(resolved, {"sparse_attention_decode_backend": "triton_sparse_mla"})
    [problem] = backend_problems(decode, "sm_120", "0.5.23")
    assert problem.startswith(
        "sparse_attention_decode_backend 'triton_sparse_mla' is a prefill backend only"
    )


def test_no_kernels_below_hopper():
    resolved = glm5_on("sm_120")
    triton = merge_overrides(resolved, {"sparse_attention_prefill_backend": "triton_sparse_mla"})
    problems = backend_problems(triton, "sm_89", "0.5.23")
    assert any(
        p.startswith(
            "sparse_attention_prefill_backend 'triton_sparse_mla' has no kernels for sm_89"
        )
        for p in problems
    ), problems
