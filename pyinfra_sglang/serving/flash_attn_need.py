"""Is flash-attn 2 built on a host, and why: the inventory's flash_attn_build where set, else
what the profile needs on the host's GPUs (data/python.toml [flash_attn.need]).

SGLang imports flash-attn 2 on few serving paths (docs/packages.md#flash-attn): the one a
profile chooses is the FA3 wrapper's fallback, taken by the fa3 attention backend on GPUs
whose compute capability is not 8.x or 9.x. The build takes about 30 minutes, so an unset
flash_attn_build builds it only there. Vision encoders and remote model code take the same
fallback; a profile serving one says so with flash_attn_build = true.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyinfra_sglang import data
from pyinfra_sglang.arch import Arch, ArchError
from pyinfra_sglang.serving.profiles import Profile

WHERE = "docs/packages.md#flash-attn"


@dataclass(frozen=True)
class FlashAttnNeed:
    build: bool
    why: str


def as_set(setting: bool) -> FlashAttnNeed:
    """What the inventory's flash_attn_build says, when it says it."""
    return FlashAttnNeed(setting, f"flash_attn_build = {str(setting).lower()} in the inventory")


def flash_attn_need(setting: bool | None, profile: Profile, archs: Iterable[str]) -> FlashAttnNeed:
    """``setting``: the inventory's flash_attn_build (None: by need); ``archs``: the GPUs'
    architectures in any spelling ("90", "sm_120", "12.0")."""
    if setting is not None:
        return as_set(setting)
    need = data.python().flash_attn.need
    parsed = []
    for text in archs:
        try:
            parsed.append(Arch.parse(text).gpu)
        except ArchError:
            continue
    backends = {
        arch.sm: profile.for_arch(arch.sm).attention_backend for arch in sorted(set(parsed))
    }
    for sm, backend in backends.items():
        number = int(sm.removeprefix("sm_"))
        if backend in need.fallback_backends and number // 10 not in need.fa3_native_majors:
            return FlashAttnNeed(
                True,
                f"needed: profile {profile.name} runs the {backend} attention backend on "
                f"{sm}, where SGLang's FA3 wrapper falls back to flash-attn 2 for prefill "
                f"({WHERE})",
            )
    if not backends:
        found = "no GPU architecture is known here"
    else:
        found = ", ".join(
            f"{backend or 'SGLang default'} on {sm}" for sm, backend in backends.items()
        )
    return FlashAttnNeed(
        False,
        f"not needed: profile {profile.name} ({found}) takes no path that imports flash-attn 2 "
        f"({WHERE}); set flash_attn_build = true for a vision model or remote model code",
    )
