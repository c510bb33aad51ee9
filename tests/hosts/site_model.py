"""The model the site test hosts serve, as the Hub stand-in holds it (tests/conftest.py)."""

from __future__ import annotations

import hashlib

SITE_MODEL = "Qwen/Qwen3-8B"  # the dense-bf16 profile's model
SITE_MODEL_COMMIT = hashlib.sha1(b"pyinfra-sglang stand-in of Qwen/Qwen3-8B").hexdigest()
SITE_HF_TOKEN = "hf_site_TOKEN_abcdefghij"


def model_files(size: int) -> dict[str, bytes]:
    """A small model's files: a config, a tokenizer and an LFS-sized weights file."""
    return {
        "config.json": b'{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}\n',
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n',
        "model.safetensors": (b"pyinfra-sglang stand-in weights " * (size // 32 + 1))[:size],
    }
