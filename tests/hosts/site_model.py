"""The model the site test hosts serve, as the Hub stand-in holds it (tests/conftest.py)."""

from __future__ import annotations

import hashlib
import json

SITE_MODEL = "Qwen/Qwen3-8B"  # the dense-bf16 profile's model
SITE_MODEL_COMMIT = hashlib.sha1(b"pyinfra-sglang stand-in of Qwen/Qwen3-8B").hexdigest()
SITE_HF_TOKEN = "hf_site_TOKEN_abcdefghij"

# A model the Hub stand-in serves slowly, for the test that kills its download mid-file: its
# weights arrive at RESUMABLE_RATE, so the client (which writes 10 MiB at a time) has written
# part of them for seconds before the rest comes.
RESUMABLE_MODEL = "test-org/resumable-model"
# Fetched once per site (model_fetch_once): the first site host downloads, the other copies.
FETCH_ONCE_MODEL = "test-org/fetch-once-model"
RESUMABLE_WEIGHTS = 24 * 1024 * 1024
RESUMABLE_RATE = 2 * 1024 * 1024  # bytes/s: ~12 s for the weights


def model_files(size: int) -> dict[str, bytes]:
    """A small model's files: a config, a tokenizer and an LFS-sized weights file."""
    return {
        "config.json": b'{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}\n',
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n',
        "model.safetensors": (b"pyinfra-sglang stand-in weights " * (size // 32 + 1))[:size],
    }


def profile_overrides(model: str) -> dict:
    """sglang_profile_overrides that serve ``model`` from the site's dense-bf16 profile, its
    size given as validation requires for another model (the stand-in models are as small as
    the placeholder: its numbers)."""
    from pyinfra_sglang.serving.profiles import load_profile

    profile = load_profile("dense-bf16")
    return {
        "model": model,
        "weights_gb": profile.weights_gb,
        "num_layers": profile.num_layers,
        "kv_bytes_per_token": dict(profile.kv_bytes_per_token),
    }


def other_model(model: str) -> str:
    """``--data`` that serves ``model`` (profile_overrides)."""
    return f"sglang_profile_overrides={json.dumps(profile_overrides(model))}"
