"""A profile TOML for a model, written from its own files: `pyinfra-sglang profile new`.

The model at the commit read, its size from model_shape/ (every number with a comment
saying where it came from), the parsers SGLang names for its family
(data/model_families.toml), and the serving choices of a template profile (dense-bf16 by
default). Deterministic: the same files give the same text.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from pyinfra_sglang.model_shape.files import ModelFiles
from pyinfra_sglang.model_shape.profile_values import identity_values, profile_values
from pyinfra_sglang.model_shape.shape import ModelShape
from pyinfra_sglang.serving.profiles import Profile

# The template's serving choices a new profile keeps: how it serves, not what it serves.
SERVING_FIELDS = (
    "cuda_graph",
    "mem_fraction_static",
    "min_kv_tokens",
    "gpu_overhead_gb",
    "start_timeout_s",
    "drain_timeout_s",
    "enable_metrics",
)


def profile_file_name(model: str) -> str:
    """A profile name from a model id or folder: its last part, lowercase, other characters
    as '-' (profiles.NAME_PATTERN)."""
    last = model.rstrip("/").rsplit("/", 1)[-1].lower()
    name = re.sub(r"[^a-z0-9.-]+", "-", last).strip("-.")
    return name or "model"


def _toml(value: Any) -> str:
    """``value`` as a TOML value (strings and keys JSON-quoted, which TOML reads the same)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        items = ", ".join(f"{k} = {_toml(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _comment(text: str) -> list[str]:
    """``text`` as TOML comment lines of at most 95 characters."""
    return ["# " + line for line in textwrap.wrap(text, 93, break_on_hyphens=False)]


def profile_text(model: str, files: ModelFiles, shape: ModelShape, template: Profile) -> str:
    """The profile's TOML text."""
    values = profile_values(shape, files.weight_bytes)
    identity = identity_values(model, files.config, shape)
    kind = f"{shape.quantization} weights" if shape.quantization else shape.dtype
    lines = [
        *_comment(
            f"{model}, written by `pyinfra-sglang profile new` from its config.json "
            f"({files.where}). Every size below is read from the model's own files "
            f"(pyinfra_sglang/model_shape/); the serving choices are profile {template.name}'s. "
            "Edit freely: validate checks it."
        ),
        f"description = {_toml(f'{model} ({kind}), sized from its config.json')}",
        "",
    ]
    if model.startswith("/"):
        lines += _comment("A folder: every host must hold the model at this path.")
    lines.append(f"model = {_toml(model)}")
    if files.commit:
        lines += [
            "# The commit read: every host downloads and serves exactly these files.",
            f"revision = {_toml(files.commit)}",
        ]
    if identity["quantization"]:
        lines += [
            f"# Its weights are {shape.quantization}; SGLang is told so (its --quantization).",
            f"quantization = {_toml(identity['quantization'])}",
        ]
    if identity["archs"]:
        lines += [
            f"# {shape.quantization} runs on these GPU architectures only (data/model_shape.toml).",
            f"archs = [{', '.join(_toml(arch) for arch in identity['archs'])}]",
        ]
    if files.config.get("auto_map"):
        lines += [
            "# config.json names its own modeling code (auto_map): SGLang runs it only with",
            "# trust_remote_code = true. Read that code before you set it.",
            "# trust_remote_code = true",
        ]
    lines.append("")
    parsers = [f for f in ("reasoning_parser", "tool_call_parser") if identity[f]]
    if parsers:
        lines += _comment(
            "The parsers SGLang names for this family (data/model_families.toml; docs/sources.md)."
        )
        lines += [f"{field} = {_toml(identity[field])}" for field in parsers]
        lines.append("")
    weights_from = (
        "the checkpoint's *.safetensors sizes"
        if files.weight_bytes
        else f"{shape.params:,} parameters priced by dtype and quantization_config"
    )
    heads = (
        f"{shape.num_attention_heads} attention heads, {shape.num_key_value_heads} KV heads of "
        f"{shape.head_dim}"
        if shape.num_key_value_heads
        else f"{shape.num_attention_heads} attention heads, MLA (one latent a layer)"
    )
    lines += [
        *_comment(f"Size: {shape.params / 1e9:.2f}B parameters; weights from {weights_from}."),
        f"weights_gb = {_toml(values['weights_gb'])}",
        *_comment(f"config.json: num_hidden_layers, num_nextn_predict_layers; {heads}."),
        f"num_layers = {values['num_layers']}",
        f"mtp_layers = {values['mtp_layers']}",
        f"num_attention_heads = {values['num_attention_heads']}",
    ]
    if values["num_key_value_heads"] is not None:
        lines.append(f"num_key_value_heads = {values['num_key_value_heads']}")
    lines += [
        "# KV cache bytes a token over all layers, per kv_cache_dtype, as SGLang sizes its pool.",
        f"kv_bytes_per_token = {_toml(values['kv_bytes_per_token'])}",
    ]
    if values["kv_bytes_per_token_by_backend"]:
        lines.append(
            f"kv_bytes_per_token_by_backend = {_toml(values['kv_bytes_per_token_by_backend'])}"
        )
    lines += [
        f"kv_split_over_tp = {_toml(values['kv_split_over_tp'])}",
        "# The longest context SGLang allows it (config.json, as SGLang reads it).",
        f"context_length = {values['context_length']}",
    ]
    if shape.num_routed_experts:
        lines += [
            f"# MoE: {shape.num_experts_per_token} of {shape.num_routed_experts} routed experts a "
            f"token in {shape.num_moe_layers} layers.",
            f"hidden_size = {values['hidden_size']}",
            f"num_moe_layers = {values['num_moe_layers']}",
            f"num_routed_experts = {values['num_routed_experts']}",
            f"num_experts_per_token = {values['num_experts_per_token']}",
            f"mlp_weights_gb = {_toml(values['mlp_weights_gb'])}",
        ]
    lines += [
        "# Decode roofline: the parameters one token reads, and their bytes each.",
        f"active_params_b = {_toml(values['active_params_b'])}",
        f"bytes_per_param = {_toml(values['bytes_per_param'])}",
        "",
        f"# Serving choices, from profile {template.name}.",
    ]
    for field in SERVING_FIELDS:
        value = getattr(template, field)
        if value is not None:
            lines.append(f"{field} = {_toml(value)}")
    for note in shape.notes:
        lines += _comment(f"Note: {note}.")
    return "\n".join(lines) + "\n"
