"""An override of a profile's ``model`` sized from that model's own files.

A profile's size fields (model_shape/profile_values.py SIZE_FIELDS) are its own model's. An
inventory that serves another model through ``sglang_profile_overrides`` gets them from the
other model's config.json and file sizes, read on the controller (model_shape/files.py: a
folder, the controller's Hub cache, or ``hf_endpoint`` at the model's revision); the values
the override gives itself win. A Hub model whose files cannot be read is refused, naming the
fields to give and the ways to let them be read: never the profile's model's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.model_files.model_snapshot import (
    DEFAULT_ENDPOINT,
    is_local_model,
    model_revision,
)
from pyinfra_sglang.model_shape.files import ModelFiles, ModelFilesError, model_files
from pyinfra_sglang.model_shape.profile_values import identity_values, profile_values
from pyinfra_sglang.model_shape.shape import ModelShape, ModelShapeError, shape_of
from pyinfra_sglang.serving.profiles import Profile, ProfileError
from pyinfra_sglang.serving.secret_files import SecretFileError, read_secret

# What an override must give itself to be planned without the model's files: the field,
# then what may stand for it.
GIVEN_SIZE = {
    "weights_gb (or min_total_gpu_memory_gb)": ("weights_gb", "min_total_gpu_memory_gb"),
    "num_layers": ("num_layers",),
    "kv_bytes_per_token": ("kv_bytes_per_token",),
}


class ModelSizeError(ProfileError):
    """The overridden model's size could not be read (the message says why and what to do)."""


def sizes_missing(overrides: Mapping[str, Any]) -> list[str]:
    """The size fields an override of ``model`` leaves to the model's files."""
    return [name for name, given in GIVEN_SIZE.items() if not set(given) & set(overrides)]


def needs_sizing(profile: Profile, overrides: Mapping[str, Any]) -> bool:
    """Does ``overrides`` serve another model than the profile's without its size?"""
    model = overrides.get("model")
    return model is not None and str(model) != profile.model and bool(sizes_missing(overrides))


@cache
def _read(
    model: str, revision: str, endpoint: str, token_file: str | None
) -> tuple[ModelFiles, ModelShape]:
    token = read_secret(token_file, "hf_token_file", "controller") if token_file else None
    files = model_files(model, revision, endpoint, token)
    return files, shape_of(files.config)


def read_model(config: HostConfig, model: str) -> tuple[ModelFiles, ModelShape]:
    """``model``'s files and shape at the host's revision, through its hf_endpoint and
    token (ModelSizeError saying why not)."""
    revision = model_revision(config.sglang_model_revision, None)
    endpoint = str(config.hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")
    token_file = str(config.hf_token_file) if config.hf_token_file else None
    try:
        return _read(model, revision, endpoint, token_file)
    except (ModelFilesError, ModelShapeError, SecretFileError) as error:
        raise ModelSizeError(_cannot_read(model, str(error))) from None


def _cannot_read(model: str, why: str) -> str:
    if is_local_model(model):
        ways = "a copy of the folder's config.json at the same path on the controller"
    else:
        ways = (
            "hf_endpoint set to a Hub or mirror the controller reaches (hf_token_file for a "
            "gated model), or its config.json in the controller's Hub cache (`hf download "
            f"{model} config.json`)"
        )
    fields = ", ".join(GIVEN_SIZE)
    return (
        f"model = {model!r}: its size could not be read from its config.json ({why}); give "
        f"{fields} (and num_attention_heads, num_key_value_heads) in sglang_profile_overrides, "
        f"or let it be read: {ways}"
    )


def sized_overrides(profile: Profile, config: HostConfig) -> dict[str, Any]:
    """The host's overrides, with the size of an overridden model read from its files where
    the override does not give it, and what its files say of its identity (parsers,
    quantization flag, GPUs) in place of the profile's model's; ModelSizeError where they
    cannot be read."""
    overrides = dict(config.sglang_profile_overrides)
    if not needs_sizing(profile, overrides):
        return overrides
    model = str(overrides["model"])
    files, shape = read_model(config, model)
    read = {
        **profile_values(shape, files.weight_bytes),
        **identity_values(model, files.config, shape),
    }
    return {**read, **overrides}
