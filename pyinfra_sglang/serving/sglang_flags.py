"""SGLang's flag spellings per release (data/sglang_flags.toml): which flag says what."""

from __future__ import annotations

from functools import cache

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data
from pyinfra_sglang.data_models import Flag
from pyinfra_sglang.versions import Version, parse_version


class FlagVersionError(PyinfraError):
    """The pinned SGLang release has no spelling for an intent that was asked for."""


@cache
def flag_table() -> dict[str, Flag]:
    """Every intent, in command-line order (the data model refuses a duplicate or a bad kind)."""
    return {entry.intent: entry for entry in data.sglang_flags().flag}


def flag_for(intent: str, sglang_version: str | Version) -> str:
    """How ``sglang_version`` spells ``intent``; FlagVersionError when it has no such flag."""
    version = parse_version(str(sglang_version))
    entry = flag_table()[intent]
    flag = entry.flag_in(version)
    if flag is None:
        known = "; ".join(s.describe() for s in entry.spellings)
        raise FlagVersionError(
            f"SGLang {version} has no flag for {intent} ({known}): pin an SGLang release "
            "that has it, or use a profile without it"
        )
    return flag


def mtp_intents(enabled: bool, num_steps: int) -> dict[str, object]:
    """The speculative-decoding intents MTP sets (data/sglang_flags.toml [mtp]): None for
    each when it is off, so none reaches the command line."""
    intents = (
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    )
    if not enabled:
        return dict.fromkeys(intents)
    mtp = data.sglang_flags().mtp
    # With topk 1, SGLang verifies steps + 1 tokens (and forces that count when it differs).
    values = (mtp.algorithm, num_steps, mtp.eagle_topk, num_steps + 1)
    return dict(zip(intents, values, strict=True))


def dp_attention_intents(size: int, sglang_version: str | Version) -> dict[str, object]:
    """The DP-attention intents for ``size`` groups (1: off): the size, and the
    --enable-dp-attention switch where the release spells the size as --dp-size (before
    0.5.22; data/sglang_flags.toml [dp_attention])."""
    if size <= 1:
        return {"attn_dp_size": None, "enable_dp_attention": None}
    version = parse_version(str(sglang_version))
    size_flag = flag_table()["attn_dp_size"].flag_in(version)
    switch = size_flag == data.sglang_flags().dp_attention.switch_with
    return {"attn_dp_size": size, "enable_dp_attention": switch or None}
