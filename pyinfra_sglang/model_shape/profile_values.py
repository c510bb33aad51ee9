"""A model's shape as the profile fields that size it: what an override of ``model`` gets
from the model's own files in place of the profile's model's numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.model_shape.families import family_rule
from pyinfra_sglang.model_shape.shape import ModelShape

GB = 1000**3

# The profile fields a model's files give: an override of ``model`` replaces every one of
# them (None where the model has no such part), so nothing of the profile's own model stays.
SIZE_FIELDS = (
    "weights_gb",
    "min_total_gpu_memory_gb",
    "num_layers",
    "mtp_layers",
    "kv_bytes_per_token",
    "kv_bytes_per_token_by_backend",
    "kv_split_over_tp",
    "context_length",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "num_moe_layers",
    "num_routed_experts",
    "num_experts_per_token",
    "mlp_weights_gb",
    "active_params_b",
    "bytes_per_param",
)


def profile_values(shape: ModelShape, weight_bytes: int | None = None) -> dict[str, Any]:
    """The profile's size fields for the model of ``shape``; ``weight_bytes``: the
    checkpoint's *.safetensors bytes where known (they win over the bytes computed from the
    config: they are what loads)."""
    total = weight_bytes if weight_bytes else shape.weight_bytes
    mlp_share = shape.mlp_weight_bytes / shape.weight_bytes if shape.weight_bytes else 0.0
    moe = shape.num_routed_experts is not None
    values: dict[str, Any] = {
        "weights_gb": round(total / GB, 1),
        "min_total_gpu_memory_gb": None,
        "num_layers": shape.num_layers,
        "mtp_layers": shape.mtp_layers,
        "kv_bytes_per_token": dict(shape.kv.per_dtype),
        "kv_bytes_per_token_by_backend": {k: dict(v) for k, v in shape.kv.by_backend.items()},
        "kv_split_over_tp": not shape.is_mla,
        "context_length": shape.context_length,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "hidden_size": shape.hidden_size,
        "num_moe_layers": shape.num_moe_layers,
        "num_routed_experts": shape.num_routed_experts,
        "num_experts_per_token": shape.num_experts_per_token,
        "mlp_weights_gb": round(total * mlp_share / GB, 1) if moe else None,
        "active_params_b": round(shape.active_params / 1e9, 2),
        "bytes_per_param": round(shape.active_weight_bytes / shape.active_params, 4),
    }
    assert tuple(values) == SIZE_FIELDS
    return values


# The profile fields that say which model it is beyond its size: another model gets its own
# (its family's parsers, its quantization's flag and GPUs) or none, never the profile's
# model's (GLM-5's parsers, served name and --quantization modelopt_fp4 for a bf16 model).
IDENTITY_FIELDS = (
    "quantization",
    "archs",
    "reasoning_parser",
    "tool_call_parser",
    "served_model_name",
    "disable_shared_experts_fusion",
    "trust_remote_code",
)


def identity_values(model: str, config: Mapping[str, Any], shape: ModelShape) -> dict[str, Any]:
    """The identity fields for ``model`` (a Hub id or folder) of ``config``: the parsers of
    its family (data/model_families.toml), the flag and GPUs of its weight format
    (data/model_shape.toml); the rest unset (trust_remote_code off: the override says so)."""
    rule = family_rule(model, config)
    weight_format = data.model_shape().quantization.get(shape.quantization or "")
    values: dict[str, Any] = {
        "quantization": weight_format.profile_quantization if weight_format else None,
        "archs": list(weight_format.archs) if weight_format and weight_format.archs else None,
        "reasoning_parser": rule.reasoning_parser if rule else None,
        "tool_call_parser": rule.tool_call_parser if rule else None,
        "served_model_name": None,
        "disable_shared_experts_fusion": False,
        "trust_remote_code": False,
    }
    assert tuple(values) == IDENTITY_FIELDS
    return values
