"""What a model's parameters weigh on disk: the config's dtype for what is not quantized, the
format of its ``quantization_config`` (data/model_shape.toml) for what is.

Each part of the model is priced by one module name of it as the checkpoint names it
(``model.layers.0.self_attn.q_proj``), so the config's list of modules left unquantized
(``modules_to_not_convert``, ModelOpt's ``exclude_modules``: fnmatch patterns or name
prefixes) decides for the part. Norms, routers and the embedding are never quantized.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.data_models import WeightFormat

# Parts no quantization format here quantizes: their weights keep the model's dtype.
NEVER_QUANTIZED = (
    "embedding",
    "lm_head",
    "norms",
    "routers",
    "expert biases",
    "MTP embedding and head",
)


class WeightFormatError(ValueError):
    """A quantization_config this does not price: the message names its method."""


@dataclass(frozen=True)
class Part:
    """One part of the model: its parameters, one module of it, and, once priced, its bytes."""

    name: str
    params: int
    module: str  # one module of the part, named as in the checkpoint
    mlp: bool = False  # MLP weights (dense, shared, routed): split over all TP ranks
    experts: bool = False  # routed experts
    mtp: bool = False  # the next-token (MTP) layers
    active_share: float = 1.0  # the share a decoded token reads (routed experts: k / E)
    bytes: int = 0
    quantized: bool = False

    @property
    def active(self) -> int:
        return round(self.params * self.active_share)


def format_name(quantization: Mapping[str, Any]) -> str:
    """The format's name in data/model_shape.toml: quant_method, ModelOpt's by its algorithm."""
    method = str(quantization.get("quant_method") or "").lower().replace("-", "_")
    if method == "modelopt":
        algo = quantization.get("quant_algo")
        if algo is None:
            groups = quantization.get("config_groups") or {}
            algo = next(iter(groups.values()), {}).get("quant_algo") if groups else None
        return f"modelopt_{str(algo or '').lower()}"
    return method


def _group(fmt: WeightFormat, quantization: Mapping[str, Any]) -> int:
    if fmt.group_size_key is None or quantization.get(fmt.group_size_key) is None:
        return fmt.group_size
    value = quantization[fmt.group_size_key]
    if isinstance(value, list):  # a block, e.g. [128, 128]
        return math.prod(int(v) for v in value)
    return int(value) if int(value) > 0 else 0


def bytes_per_weight(fmt: WeightFormat, quantization: Mapping[str, Any]) -> float:
    """Bytes one quantized weight takes, its share of its group's scale and zero included."""
    bits = int(quantization.get(fmt.bits_key) or fmt.bits) if fmt.bits_key else fmt.bits
    group = _group(fmt, quantization)
    per_group = 0.0
    if group:
        per_group = fmt.scale_bytes + (bits / 8 if fmt.zero_point else 0)
        per_group /= group
    return bits / 8 + per_group


def excluded(module: str, patterns: list[str]) -> bool:
    """Is ``module`` left unquantized by one of ``patterns`` (fnmatch, or a name prefix)?"""
    for pattern in patterns:
        if fnmatch.fnmatch(module, pattern) or fnmatch.fnmatch(module, pattern + ".*"):
            return True
        if not any(c in pattern for c in "*?[") and (
            module.startswith(pattern) or f".{pattern}." in f".{module}."
        ):
            return True
    return False


def weight_bytes(
    parts: list[Part], config: Mapping[str, Any], dtype: str
) -> tuple[list[Part], str | None]:
    """The parts priced, and the format's name (None: not quantized)."""
    plain = data.model_shape().dtype_bytes[dtype]
    quantization = config.get("quantization_config")
    if not quantization:
        return [replace(p, bytes=p.params * plain) for p in parts], None
    name = format_name(quantization)
    fmt = data.model_shape().quantization.get(name)
    if fmt is None:
        known = ", ".join(sorted(data.model_shape().quantization))
        raise WeightFormatError(
            f"config.json: quantization_config's method {name or '(none)'} is not one this "
            f"sizes ({known}); give weights_gb in the profile"
        )
    patterns = [str(p) for p in quantization.get(fmt.exclude_key) or []]
    per_weight = bytes_per_weight(fmt, quantization)
    priced = []
    for part in parts:
        quantized = (
            part.name not in NEVER_QUANTIZED
            and (fmt.quantizes == "linear" or part.experts)
            and not excluded(part.module, patterns)
        )
        size = part.params * per_weight if quantized else part.params * plain
        priced.append(replace(part, bytes=round(size), quantized=quantized))
    return priced, name
