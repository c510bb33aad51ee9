"""Does a profile's model fit its GPUs? Per GPU, at the planned tensor-parallel size.

SGLang splits each GPU's memory in two (server_args, ``mem_fraction_static``): the static
part holds the weights and the KV cache pool, the rest activations and CUDA graphs. So a
profile that states its model's size (``weights_gb``, ``kv_bytes_per_token``,
``min_kv_tokens``, ``gpu_overhead_gb``) fits GPUs of M GiB at tensor-parallel size TP when

    weights / TP + KV cache for min_kv_tokens + gpu_overhead_gb (+ the MTP draft's share)
        <= mem_fraction_static x M

(data/memory_fit.toml cites the sources). A profile that states none of that gives a plain
floor over all GPUs instead (``min_total_gpu_memory_gb``), as profiles did before.

MoE layouts (parallelism.py): expert parallelism splits the routed experts by expert instead
of by slice, the same bytes per GPU (experts / tp). DP attention with D groups runs
attention on TP / D GPUs per group: the weights outside the MLPs (``mlp_weights_gb``'s
complement: attention, embeddings) and a KV cache split by heads are split D times less,

    mlp_weights / TP + (weights - mlp_weights) / (TP / D)

and all of the weights count as the second part where the profile leaves mlp_weights_gb unset
(an upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyinfra_sglang import data
from pyinfra_sglang.data_models import MemoryFit

if TYPE_CHECKING:
    # Annotations only: a profile's validation reaches this module (through
    # parallelism.py), so it cannot import profiles.py back.
    from pyinfra_sglang.serving.profiles import Profile

GIB = 1024**3
GB = 1000**3
# Where no tensor-parallel size up to this holds a model, none will (overhead and KV alone
# exceed the GPU): the search for the fewest GPUs stops there.
MAX_GPUS = 1024


def _settings() -> MemoryFit:
    return data.memory_fit()


def mem_fraction(profile: Profile) -> float:
    """The fraction of each GPU's memory SGLang gives weights and KV cache: the profile's
    mem_fraction_static, else the planning value of data/memory_fit.toml."""
    if profile.mem_fraction_static is not None:
        return profile.mem_fraction_static
    return float(_settings().unset_mem_fraction_static)


def kv_bytes_per_token(profile: Profile) -> int:
    """Bytes one token's KV cache takes on one rank before any tensor-parallel split, for
    the profile's KV cache dtype ("auto" where unset) and sparse-attention backends; the
    largest listed for a dtype the profile does not list (an upper bound); 0 when it lists
    none.

    A backend of ``kv_bytes_per_token_by_backend`` (the prefill one first, then the decode
    one) replaces the dtypes it lists: SGLang keeps the raw MLA layout of a DSA cache (576
    bytes per layer in fp8) when either backend is trtllm, and adds per-block scales and a
    bf16 rope part (656 bytes) with the others (its ``calculate_mla_kv_cache_dim``;
    docs/sources.md, SGLang releases, read from their wheels). A profile not yet resolved
    for an architecture (no backends) gets the default table."""
    table = dict(profile.kv_bytes_per_token)
    if not table:
        return 0
    by_backend = profile.kv_bytes_per_token_by_backend
    for backend in (
        profile.sparse_attention_prefill_backend,
        profile.sparse_attention_decode_backend,
    ):
        if backend in by_backend:
            table.update(by_backend[backend])
            break
    return table.get(profile.kv_cache_dtype or "auto", max(table.values()))


@dataclass(frozen=True)
class GpuNeed:
    """What one GPU must hold, GiB, at one tensor-parallel size."""

    profile: str
    tp_size: int
    gpu_memory_gb: float
    fraction: float
    weights_gb: float  # the model's weights on the Hub, decimal GB (all layers)
    weights_gib: float  # this GPU's share of the weights loaded
    whole_checkpoint: bool  # False: the MTP layer stays on disk
    kv_tokens: int
    kv_gib: float
    overhead_gib: float
    mtp_gib: float  # the MTP draft's KV and graphs (its weights are in weights_gib)
    dp_attention: int = 1  # attention data-parallel groups
    mlp_weights_gb: float | None = None  # the MLP part of weights_gb, where split apart

    @property
    def need(self) -> float:
        return self.weights_gib + self.kv_gib + self.overhead_gib + self.mtp_gib

    @property
    def budget(self) -> float:
        return self.fraction * self.gpu_memory_gb

    @property
    def fits(self) -> bool:
        return self.need <= self.budget

    def parts(self) -> str:
        """The need, GiB, part by part: "weights 53.0 (460.8 GB less the MTP layer / 8) + ..."."""
        whole = "" if self.whole_checkpoint else " less the MTP layer"
        if self.dp_attention > 1:
            attn_tp = max(1, self.tp_size // self.dp_attention)
            mlp = self.mlp_weights_gb or 0.0
            split = f"MLP {mlp:g} GB / {self.tp_size} + " if mlp else ""
            rest = f"{self.weights_gb - mlp:g} GB" if mlp else f"all {self.weights_gb:g} GB"
            weights = (
                f"weights {self.weights_gib:.1f} ({split}the rest {rest} / {attn_tp}, "
                f"attention on {attn_tp} GPU(s) per DP-attention group{whole})"
            )
        else:
            weights = (
                f"weights {self.weights_gib:.1f} ({self.weights_gb:g} GB{whole} / {self.tp_size})"
            )
        parts = [weights]
        if self.kv_tokens:
            parts.append(f"KV cache for {self.kv_tokens} tokens {self.kv_gib:.1f}")
        if self.overhead_gib:
            parts.append(f"overhead {self.overhead_gib:.1f}")
        if self.mtp_gib:
            parts.append(f"MTP draft KV and graphs {self.mtp_gib:.1f}")
        return " + ".join(parts)

    def text(self) -> str:
        return (
            f"each GPU needs {self.need:.1f} GiB ({self.parts()}), but mem_fraction_static "
            f"{self.fraction:g} x {self.gpu_memory_gb:g} GB = {self.budget:.1f} GiB is what SGLang "
            "gives weights and KV cache"
        )


def kv_bytes_per_gpu_token(profile: Profile, tp_size: int) -> float:
    """Bytes one token's KV cache takes on each GPU at ``tp_size``: split by KV head over the
    attention's tensor-parallel ranks (SGLang replicates a head over ranks beyond the heads),
    whole on every rank for MLA."""
    attn_tp = max(1, tp_size // (profile.dp_attention_size or 1))
    kv_heads = profile.num_key_value_heads or attn_tp
    split = min(attn_tp, kv_heads) if profile.kv_split_over_tp else 1
    return kv_bytes_per_token(profile) / split


def per_gpu_need(profile: Profile, tp_size: int, gpu_memory_gb: float) -> GpuNeed | None:
    """What each of ``tp_size`` GPUs of ``gpu_memory_gb`` must hold; None for a profile with
    a plain floor (min_total_gpu_memory_gb) instead of the model's size."""
    if profile.weights_gb is None:
        return None
    layers, mtp_layers = profile.num_layers, profile.mtp_layers
    weights = profile.weights_gb * GB / GIB
    whole = not (mtp_layers and not profile.mtp and layers)
    if not whole:
        # The next-token layer is loaded only as MTP's draft: without it, its share stays on
        # disk (a share by layer count; the embedding and head are in every layer's share).
        weights *= layers / (layers + mtp_layers)
    dp = profile.dp_attention_size or 1
    attn_tp = max(1, tp_size // dp)
    if dp > 1:
        # Attention and embeddings on tp / dp ranks per group; MLPs over all tp ranks.
        mlp_share = (profile.mlp_weights_gb or 0.0) / profile.weights_gb
        per_gpu = weights * mlp_share / tp_size + weights * (1 - mlp_share) / attn_tp
    else:
        per_gpu = weights / tp_size
    tokens = profile.min_kv_tokens or 0
    kv = tokens * kv_bytes_per_gpu_token(profile, tp_size) / GIB
    mtp = 0.0
    if profile.mtp:
        # The draft layer keeps the same tokens' KV for its own layer(s).
        mtp = kv * mtp_layers / layers if layers else 0.0
        mtp += float(_settings().mtp.draft_overhead_gb)
    return GpuNeed(
        profile=profile.name,
        tp_size=tp_size,
        gpu_memory_gb=gpu_memory_gb,
        fraction=mem_fraction(profile),
        weights_gb=profile.weights_gb,
        weights_gib=per_gpu,
        whole_checkpoint=whole,
        kv_tokens=tokens,
        kv_gib=kv,
        overhead_gib=profile.gpu_overhead_gb,
        mtp_gib=mtp,
        dp_attention=dp,
        mlp_weights_gb=profile.mlp_weights_gb,
    )


def holds(profile: Profile, gpu_count: int, gpu_memory_gb: float) -> bool:
    """Do ``gpu_count`` GPUs of ``gpu_memory_gb``, one tensor-parallel rank each, hold the
    profile's model?"""
    if gpu_count % (profile.dp_attention_size or 1):
        return False  # no such layout: the DP-attention groups must divide the GPUs
    need = per_gpu_need(profile, gpu_count, gpu_memory_gb)
    if need is None:
        return gpu_count * gpu_memory_gb >= (profile.min_total_gpu_memory_gb or 0)
    return need.fits


def fewest_holding(profile: Profile, gpu_memory_gb: float, at_least: int = 1) -> int | None:
    """The fewest GPUs of ``gpu_memory_gb``, ``at_least`` of them, that hold the model
    (the tensor-parallel size its heads allow aside); None when no count does."""
    if profile.weights_gb is None:
        floor = profile.min_total_gpu_memory_gb or 0
        return max(at_least, math.ceil(floor / gpu_memory_gb))
    # The need per GPU falls as the weights spread: the first count that holds it is it.
    return next(
        (n for n in range(at_least, MAX_GPUS + 1) if holds(profile, n, gpu_memory_gb)), None
    )


def gpu_memory_needed(profile: Profile, gpu_count: int) -> float:
    """The least memory, GiB, each of ``gpu_count`` GPUs needs to hold the model."""
    need = per_gpu_need(profile, gpu_count, 1.0)
    if need is None:
        return (profile.min_total_gpu_memory_gb or 0) / gpu_count
    return need.need / need.fraction


def shortfall(profile: Profile, gpu_count: int, gpu_memory_gb: float) -> str:
    """Why ``gpu_count`` GPUs of ``gpu_memory_gb`` do not hold the model, with the numbers."""
    need = per_gpu_need(profile, gpu_count, gpu_memory_gb)
    if need is None:
        floor = profile.min_total_gpu_memory_gb or 0
        have = gpu_count * gpu_memory_gb
        return (
            f"needs at least {floor:g} GB of GPU memory in total (min_total_gpu_memory_gb); "
            f"{gpu_count} x {gpu_memory_gb:g} GB = {have:g} GB here"
        )
    dp = profile.dp_attention_size or 1
    layout = f" with {dp} DP-attention groups" if dp > 1 else ""
    return (
        f"does not fit {gpu_count} x {gpu_memory_gb:g} GB at tensor-parallel size "
        f"{gpu_count}{layout}: {need.text()}"
    )
