"""A server's MoE layout: tensor-parallel size x expert-parallel size x attention
data-parallel groups x all-to-all backend, and what SGLang's server_args refuses in one by
itself (the release and the GPUs aside: parallelism.layout_problems adds those).

Below the profile: it reads the profile's fields through ``MoeChoice``, so the profile's own
validation can use it without an import cycle."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class MoeChoice(Protocol):
    """The profile fields a layout is made of and checked against."""

    tp_size: int | None
    ep_size: int | None
    dp_attention_size: int | None
    moe_a2a_backend: str | None
    num_routed_experts: int | None
    num_experts_per_token: int | None
    num_layers: int | None
    num_moe_layers: int | None
    mlp_weights_gb: float | None
    weights_gb: float | None


@dataclass(frozen=True)
class Layout:
    """How one server spreads a model over its GPUs."""

    tp: int
    ep: int = 1
    dp: int = 1  # attention data-parallel groups
    a2a: str | None = None  # the MoE all-to-all backend; None: SGLang's "none"

    @property
    def attn_tp(self) -> int:
        """GPUs per attention group."""
        return max(1, self.tp // self.dp)

    def name(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.dp > 1:
            parts.append(f"DP-attention {self.dp}")
        if self.a2a:
            parts.append(f"all-to-all {self.a2a}")
        return " + ".join(parts)


def layout_of(profile: MoeChoice, tp_size: int) -> Layout:
    """The profile's layout at ``tp_size``."""
    a2a = profile.moe_a2a_backend
    return Layout(
        tp=tp_size,
        ep=profile.ep_size or 1,
        dp=profile.dp_attention_size or 1,
        a2a=None if a2a in (None, "none") else a2a,
    )


def divisors(n: int) -> list[int]:
    """n's divisors, found up to its square root (10^12 GPUs: a million steps, not 10^12)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def allowed_ep_sizes(profile: MoeChoice, tp_size: int) -> list[int]:
    """The expert-parallel sizes that divide both ``tp_size`` and the routed experts."""
    experts = profile.num_routed_experts
    return [e for e in divisors(tp_size) if experts is None or experts % e == 0]


def profile_layout_problems(profile: MoeChoice) -> list[str]:
    """What is wrong with a profile's MoE choices by themselves (the tensor-parallel size,
    the release and the GPUs aside, unless the profile sets tp_size)."""
    problems = []
    ep, dp, a2a = profile.ep_size or 1, profile.dp_attention_size or 1, profile.moe_a2a_backend
    experts, active = profile.num_routed_experts, profile.num_experts_per_token
    moe_choice = [
        f"{name} {value}"
        for name, value in (("ep_size", ep), ("dp_attention_size", dp))
        if value > 1
    ] + ([f"moe_a2a_backend {a2a}"] if a2a not in (None, "none") else [])
    if moe_choice and experts is None:
        problems.append(
            f"{', '.join(moe_choice)} need a mixture-of-experts model: set num_routed_experts "
            "(n_routed_experts in its config.json); allowed for a dense model: ep_size 1, "
            "dp_attention_size 1, no moe_a2a_backend"
        )
    if experts is not None and experts % ep:
        sizes = ", ".join(map(str, divisors(experts)))
        problems.append(
            f"ep_size {ep} does not divide the model's {experts} routed experts (each rank "
            f"holds experts / ep_size of them); allowed: {sizes}"
        )
    if active is not None and experts is not None and active > experts:
        problems.append(f"num_experts_per_token {active} exceeds num_routed_experts {experts}")
    if a2a not in (None, "none") and ep == 1:
        problems.append(
            f"moe_a2a_backend {a2a} needs expert parallelism: SGLang sets ep_size to the "
            "tensor-parallel size with an all-to-all; set ep_size to it"
        )
    layers, moe_layers = profile.num_layers, profile.num_moe_layers
    if moe_layers is not None and layers is not None and moe_layers > layers:
        problems.append(f"num_moe_layers {moe_layers} exceeds num_layers {layers}")
    mlp, weights = profile.mlp_weights_gb, profile.weights_gb
    if mlp is not None and (weights is None or mlp >= weights):
        shown = "unset" if weights is None else f"{weights:g}"
        problems.append(
            f"mlp_weights_gb {mlp:g} must be less than weights_gb ({shown}): it is a part of them"
        )
    if profile.tp_size is not None and not problems:
        problems += tp_layout_problems(layout_of(profile, profile.tp_size), profile)
    return problems


def tp_layout_problems(layout: Layout, profile: MoeChoice) -> list[str]:
    """What SGLang's server_args refuses in ``layout`` (data/parallelism.toml)."""
    problems = []
    tp = layout.tp
    if tp % layout.ep or layout.ep not in allowed_ep_sizes(profile, tp):
        problems.append(
            f"ep_size {layout.ep} does not split tensor-parallel size {tp} and the "
            f"{profile.num_routed_experts} routed experts (SGLang runs each expert on "
            f"tp_size / ep_size ranks); allowed at tp_size {tp}: "
            f"{', '.join(map(str, allowed_ep_sizes(profile, tp)))}"
        )
    if tp % layout.dp:
        problems.append(
            f"dp_attention_size {layout.dp} does not divide tensor-parallel size {tp} "
            f"(SGLang: tp_size must be divisible by the DP size); allowed: "
            f"{', '.join(map(str, divisors(tp)))}"
        )
    if layout.a2a and layout.ep != tp:
        problems.append(
            f"moe_a2a_backend {layout.a2a} runs expert parallelism over all {tp} ranks "
            f"(SGLang sets ep_size = tp_size): ep_size {layout.ep} would be changed to {tp}; "
            f"set ep_size {tp}, or leave moe_a2a_backend unset"
        )
    return problems
