"""A host's model profile: the profile its config names, with its inventory overrides."""

from __future__ import annotations

from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.serving.profiles import Profile, load_profile, merge_overrides


def host_profile(config: HostConfig) -> Profile:
    """The host's model profile with its inventory overrides applied (ProfileError if bad)."""
    profile = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    return merge_overrides(profile, config.sglang_profile_overrides)
