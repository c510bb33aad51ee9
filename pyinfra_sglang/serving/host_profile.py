"""A host's model profile: the profile its config names, with its inventory overrides."""

from __future__ import annotations

from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.model_files.model_snapshot import is_local_model
from pyinfra_sglang.serving.model_sizing import ModelSizeError, sized_overrides
from pyinfra_sglang.serving.profiles import Profile, load_profile, merge_overrides


def host_profile(config: HostConfig) -> Profile:
    """The host's model profile with its inventory overrides applied, an overridden model
    sized from its own files (ProfileError if bad or unreadable)."""
    profile = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    try:
        overrides = sized_overrides(profile, config)
    except ModelSizeError:
        if not is_local_model(str(config.sglang_profile_overrides["model"])):
            raise
        # A folder on the host the controller cannot read: validation warned that the
        # profile's size stands for it.
        overrides = config.sglang_profile_overrides
    return merge_overrides(profile, overrides)
