"""A model's size from its own config.json, as transformers lays the weights out and SGLang
sizes the KV cache (docs/sources.md, "Model files").

``shape_of(config)`` counts the parameters of each part of the model (embedding, attention,
dense MLPs, routed and shared experts, routers, norms, the next-token (MTP) layers), the
bytes they take on disk under the config's dtype and quantization_config (weights.py), the
parameters a token reads (MoE: its experts only), and the KV cache bytes per token per
cache dtype:

- grouped-query attention: layers x num_key_value_heads x (head_dim + v_head_dim) x dtype,
  split over tensor-parallel ranks by KV head; sliding-window layers at their share of the
  tokens (data/model_shape.toml [kv_cache]);
- MLA (``kv_lora_rank``): layers x (kv_lora_rank + qk_rope_head_dim) x dtype, one latent
  that every rank holds whole; DSA's indexer and fp8 layout on top.

Families read: Llama 3.x, Qwen3 dense and MoE, DeepSeek-V3-style MLA + MoE (GLM-5's DSA
indexer too), gpt-oss, and any config of the same keys. A config that lacks a size it needs,
or holds a kind of layer this does not size (linear attention), is refused naming the key:
never a guessed size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.model_shape.weights import Part, WeightFormatError, weight_bytes

# Layer kinds of ``layer_types`` sized here: others (linear attention, mamba) keep a state
# this does not size.
ATTENTION_LAYER_KINDS = ("full_attention", "sliding_attention")


class ModelShapeError(ValueError):
    """A config.json this cannot size: the message names the key."""


# The largest count a size key may hold (a config from the Hub is read, not trusted): far
# above any model's (vocabularies of 10^6, hidden sizes of 10^5), and layers are fewer still,
# since a list a layer is built.
MOST = 10**9
MOST_LAYERS = 100_000


def _int(config: Mapping[str, Any], key: str, default: int | None = None, most: int = MOST) -> int:
    value = config.get(key, default)
    if value is None:
        raise ModelShapeError(f"config.json has no {key}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ModelShapeError(f"config.json: {key} = {value!r} is not a count from 0 to {most}")
    return value


def _optional_int(config: Mapping[str, Any], key: str, default: int = 0) -> int:
    """A count the config may leave unset or null (then ``default``)."""
    return default if config.get(key) is None else _int(config, key)


def _first_int(config: Mapping[str, Any], *keys: str) -> int:
    """The first of ``keys`` the config sets, as a count; 0 when it sets none."""
    key = next((k for k in keys if config.get(k) is not None), None)
    return 0 if key is None else _int(config, key)


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` the config sets (not null)."""
    return next((config[k] for k in keys if config.get(k) is not None), None)


@dataclass(frozen=True)
class KvSizes:
    """KV cache bytes per token over every layer, per --kv-cache-dtype ("auto": the model's
    dtype), and where a backend lays the cache out its own way (DSA), per backend."""

    per_dtype: dict[str, int]
    by_backend: dict[str, dict[str, int]]


@dataclass(frozen=True)
class ModelShape:
    """What the model's files say of its size."""

    model_type: str
    parts: tuple[Part, ...]  # every parameter, part by part (MTP layers included)
    num_layers: int
    mtp_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int | None  # None: MLA (one latent, not split by head)
    head_dim: int
    kv: KvSizes
    context_length: int
    dtype: str
    quantization: str | None  # the weight format's name in data/model_shape.toml
    num_routed_experts: int | None = None
    num_experts_per_token: int | None = None
    num_moe_layers: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_mla(self) -> bool:
        return self.num_key_value_heads is None

    @property
    def params(self) -> int:
        """Every parameter the checkpoint holds (MTP layers included)."""
        return sum(p.params for p in self.parts)

    @property
    def main_params(self) -> int:
        """The parameters of the model without its next-token (MTP) layers."""
        return sum(p.params for p in self.parts if not p.mtp)

    @property
    def active_params(self) -> int:
        """Parameters one decoded token reads: its experts only (MoE), one row of the
        embedding (none counted; the output head reads it whole where tied), MTP aside."""
        return sum(p.active for p in self.read_per_token)

    @property
    def read_per_token(self) -> tuple[Part, ...]:
        tied = not any(p.name == "lm_head" for p in self.parts)
        return tuple(p for p in self.parts if not p.mtp and (p.name != "embedding" or tied))

    @property
    def weight_bytes(self) -> int:
        """The checkpoint's weight bytes, scales included."""
        return sum(p.bytes for p in self.parts)

    @property
    def active_weight_bytes(self) -> float:
        """The bytes of active_params: what one decoded token reads of the weights."""
        return sum(p.bytes * p.active / p.params for p in self.read_per_token if p.params)

    @property
    def mlp_weight_bytes(self) -> int:
        return sum(p.bytes for p in self.parts if p.mlp)


def _dtype(config: Mapping[str, Any]) -> str:
    dtype = _first(config, "torch_dtype", "dtype") or "bfloat16"
    if str(dtype) not in data.model_shape().dtype_bytes:
        known = ", ".join(data.model_shape().dtype_bytes)
        raise ModelShapeError(f"config.json: torch_dtype {dtype!r} is not one of {known}")
    return str(dtype)


def _layer_kinds(config: Mapping[str, Any], layers: int) -> list[str]:
    kinds = config.get("layer_types")
    if kinds is None:
        return ["full_attention"] * layers
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise ModelShapeError("config.json: layer_types does not name each of the layers")
    unknown = sorted({str(k) for k in kinds} - set(ATTENTION_LAYER_KINDS))
    if unknown:
        raise ModelShapeError(
            f"config.json: layer_types holds {', '.join(unknown)}: layers whose state is not "
            "a KV cache are not sized here; give the size in the profile"
        )
    return [str(k) for k in kinds]


def _attention_params(config: Mapping[str, Any], hidden: int, heads: int) -> tuple[int, str]:
    """Parameters of one layer's attention, and its kind ("mla" or "gqa")."""
    kv_lora = _optional_int(config, "kv_lora_rank")
    if kv_lora:
        rope = _int(config, "qk_rope_head_dim")
        nope = _int(config, "qk_nope_head_dim")
        v_dim = _int(config, "v_head_dim")
        q_lora = _optional_int(config, "q_lora_rank")
        if q_lora:
            q = hidden * q_lora + q_lora + q_lora * heads * (nope + rope)
        else:
            q = hidden * heads * (nope + rope)
        kv = hidden * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v_dim)
        params = q + kv + heads * v_dim * hidden
        if config.get("index_n_heads"):
            # DSA's indexer (GLM-5, DeepSeek-V3.2): its query, key, norm and head weights.
            index_heads = _int(config, "index_n_heads")
            index_dim = _int(config, "index_head_dim")
            params += (q_lora or hidden) * index_heads * index_dim
            params += hidden * index_dim + 2 * index_dim + hidden * index_heads
        return params, "mla"
    head_dim = _head_dim(config, hidden, heads)
    kv_heads = _int(config, "num_key_value_heads", heads)
    params = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    if config.get("attention_bias"):
        params += heads * head_dim + 2 * kv_heads * head_dim + hidden
    if config.get("model_type") in data.model_shape().qk_norm_model_types:
        params += 2 * head_dim
    return params, "gqa"


def _head_dim(config: Mapping[str, Any], hidden: int, heads: int) -> int:
    return _optional_int(config, "head_dim") or hidden // heads


@dataclass(frozen=True)
class _Moe:
    experts: int
    per_token: int
    expert_params: int  # one routed expert's weights
    expert_bias: int  # one routed expert's biases (gpt-oss), kept in the model's dtype
    shared_params: int  # the shared experts of one layer
    router_params: int
    moe_layers: tuple[int, ...]


def _moe(config: Mapping[str, Any], hidden: int, layers: int) -> _Moe | None:
    experts = _first_int(config, "n_routed_experts", "num_experts", "num_local_experts")
    if not experts:
        return None
    per_token = _first_int(config, "num_experts_per_tok", "experts_per_token")
    if not per_token:
        raise ModelShapeError("config.json names experts but not num_experts_per_tok")
    inner = _first_int(config, "moe_intermediate_size", "intermediate_size")
    if not inner:
        raise ModelShapeError("config.json has no moe_intermediate_size")
    expert = 3 * hidden * inner  # gate, up and down projections
    # gpt-oss's experts carry biases (gate and up, down), which its MXFP4 leaves in bf16.
    bias = 2 * inner + hidden if config.get("model_type") == "gpt_oss" else 0
    shared = 0
    if config.get("n_shared_experts"):
        shared = _int(config, "n_shared_experts") * 3 * hidden * inner
    elif config.get("shared_expert_intermediate_size"):
        shared = 3 * hidden * _int(config, "shared_expert_intermediate_size") + hidden
    router = hidden * experts
    if config.get("topk_method") == "noaux_tc" or config.get("model_type") == "gpt_oss":
        router += experts  # the router's bias (score correction in DeepSeek-V3)
    dense_first = _optional_int(config, "first_k_dense_replace")
    step = _optional_int(config, "decoder_sparse_step", 1) or 1
    listed = config.get("mlp_only_layers") or []
    if not isinstance(listed, list) or not all(type(i) is int for i in listed):
        raise ModelShapeError("config.json: mlp_only_layers is not a list of layer numbers")
    dense_only = set(listed)
    moe_layers = tuple(
        i for i in range(layers) if i >= dense_first and i not in dense_only and (i + 1) % step == 0
    )
    return _Moe(experts, per_token, expert, bias, shared, router, moe_layers)


def _kv_sizes(
    config: Mapping[str, Any], kind: str, kinds: list[str], head_dim: int, kv_heads: int
) -> KvSizes:
    """As SGLang's pool sizes a token: grouped-query attention K and V per KV head, MLA one
    latent (kv_lora_rank + qk_rope_head_dim), DSA's indexer on top; sliding-window layers at
    their share of the full layers' tokens."""
    sizing = data.model_shape().kv_cache
    per_element = dict(data.model_shape().kv_cache_dtype_bytes)
    per_element["auto"] = data.model_shape().dtype_bytes[_dtype(config)]
    layers = len(kinds)
    if kind == "gqa":
        v_dim = _optional_int(config, "v_head_dim") or head_dim
        width = kv_heads * (head_dim + v_dim)
        full = kinds.count("full_attention")
        weight = full + float(sizing.swa_full_tokens_ratio) * (layers - full)
        table = {name: round(weight * width * size) for name, size in per_element.items()}
        return KvSizes(dict(sorted(table.items())), {})
    latent = _int(config, "kv_lora_rank")
    rope = _int(config, "qk_rope_head_dim")
    table = {name: layers * (latent + rope) * size for name, size in per_element.items()}
    by_backend: dict[str, dict[str, int]] = {}
    if config.get("index_n_heads"):
        block = sizing.dsa_block
        index_dim = _int(config, "index_head_dim")
        indexer = index_dim + index_dim // block * sizing.dsa_scale_bytes
        scaled = latent + latent // block * sizing.dsa_scale_bytes + rope * sizing.dsa_rope_bytes
        plain_fp8 = {
            n: layers * (latent + rope + indexer) for n, s in per_element.items() if s == 1
        }
        table = {
            name: layers * ((scaled if size == 1 else (latent + rope) * size) + indexer)
            for name, size in per_element.items()
        }
        by_backend = {backend: plain_fp8 for backend in sizing.dsa_plain_fp8_backends}
    return KvSizes(dict(sorted(table.items())), by_backend)


# The keys SGLang reads the context length from, the first set wins (its get_context_length).
CONTEXT_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


def context_length(config: Mapping[str, Any]) -> int:
    """The longest context SGLang allows the model: the first of CONTEXT_KEYS the config sets,
    times the rope scaling factor where the scaling names no original length and is not
    Llama 3's (which max_position_embeddings already counts)."""
    key = next((k for k in CONTEXT_KEYS if config.get(k) is not None), None)
    if key is None:
        raise ModelShapeError(f"config.json sets none of {', '.join(CONTEXT_KEYS)}")
    length = _int(config, key)
    scaling = config.get("rope_scaling")
    if (
        isinstance(scaling, Mapping)
        and scaling.get("factor")
        and "original_max_position_embeddings" not in scaling
        and (scaling.get("rope_type") or scaling.get("type")) != "llama3"
    ):
        try:
            length = int(length * float(scaling["factor"]))
        except (TypeError, ValueError, OverflowError):
            raise ModelShapeError(
                f"config.json: rope_scaling.factor = {scaling['factor']!r} is not a number"
            ) from None
    return length


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config: a multimodal config's text_config, else itself."""
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and "hidden_size" not in config:
        merged = dict(inner)
        for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
            if key in config and key not in merged:
                merged[key] = config[key]
        return merged
    return config


def shape_of(raw: Mapping[str, Any]) -> ModelShape:
    """The model's shape from its config.json (ModelShapeError naming what is missing or
    not a size)."""
    try:
        return _shape_of(raw)
    except (TypeError, ValueError, OverflowError, ArithmeticError) as error:
        if isinstance(error, ModelShapeError):
            raise
        raise ModelShapeError(f"config.json holds a value that is not a size ({error})") from None


def _shape_of(raw: Mapping[str, Any]) -> ModelShape:
    if not isinstance(raw, Mapping):
        raise ModelShapeError("config.json is not a JSON object")
    config = text_config(raw)
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers", most=MOST_LAYERS)
    heads = _int(config, "num_attention_heads")
    vocab = _int(config, "vocab_size")
    if not hidden or not layers or not heads:
        raise ModelShapeError("config.json: hidden_size, num_hidden_layers and heads must be > 0")
    kinds = _layer_kinds(config, layers)
    attention, kind = _attention_params(config, hidden, heads)
    head_dim = _head_dim(config, hidden, heads)
    kv_heads = _int(config, "num_key_value_heads", heads)
    moe = _moe(config, hidden, layers)
    mtp = _optional_int(config, "num_nextn_predict_layers")
    norms = 2 * hidden
    dense_mlp = 0
    if moe is None or len(moe.moe_layers) < layers:
        dense_mlp = 3 * hidden * _int(config, "intermediate_size")
    if config.get("model_type") == "gpt_oss":
        attention += heads  # the attention sinks, one per head
    tied = bool(config.get("tie_word_embeddings", True))
    dense_layers = layers - (len(moe.moe_layers) if moe else 0)

    parts = [Part("embedding", vocab * hidden, "model.embed_tokens")]
    if not tied:
        parts.append(Part("lm_head", vocab * hidden, "lm_head"))
    parts.append(Part("attention", layers * attention, "model.layers.0.self_attn.q_proj"))
    parts.append(Part("norms", layers * norms + hidden, "model.norm"))
    if dense_layers:
        parts.append(
            Part("dense MLP", dense_layers * dense_mlp, "model.layers.0.mlp.gate_proj", mlp=True)
        )
    if moe:
        n = len(moe.moe_layers)
        parts.append(
            Part(
                "routed experts",
                n * moe.experts * moe.expert_params,
                "model.layers.0.mlp.experts.0.gate_proj",
                mlp=True,
                experts=True,
                active_share=moe.per_token / moe.experts,
            )
        )
        if moe.expert_bias:
            parts.append(
                Part(
                    "expert biases",
                    n * moe.experts * moe.expert_bias,
                    "model.layers.0.mlp.experts.gate_up_proj_bias",
                    mlp=True,
                    active_share=moe.per_token / moe.experts,
                )
            )
        if moe.shared_params:
            parts.append(
                Part(
                    "shared experts",
                    n * moe.shared_params,
                    "model.layers.0.mlp.shared_experts.gate_proj",
                    mlp=True,
                )
            )
        parts.append(Part("routers", n * moe.router_params, "model.layers.0.mlp.gate"))
    if mtp:
        # Each next-token layer (DeepSeek-V3, GLM): one decoder layer (an MoE one where the
        # model has experts), its two input norms and projection, and its own copies of the
        # embedding and output head, as the checkpoint stores them.
        mlp = dense_mlp
        if moe:
            mlp = moe.experts * (moe.expert_params + moe.expert_bias)
            mlp += moe.shared_params + moe.router_params
        layer = attention + norms + mlp + 2 * hidden * hidden + 3 * hidden
        parts.append(
            Part("MTP layers", mtp * layer, f"model.layers.{layers}.mlp.experts.0", mtp=True)
        )
        parts.append(
            Part(
                "MTP embedding and head",
                mtp * 2 * vocab * hidden,
                f"model.layers.{layers}.embed_tokens",
                mtp=True,
            )
        )
    try:
        priced, quantization = weight_bytes(parts, config, _dtype(config))
    except WeightFormatError as error:
        raise ModelShapeError(str(error)) from None
    notes = []
    if "sliding_attention" in kinds:
        notes.append(
            "sliding-window layers counted as full-attention ones in the KV cache (an upper bound)"
        )
    return ModelShape(
        model_type=str(config.get("model_type") or "unknown"),
        parts=tuple(priced),
        num_layers=layers,
        mtp_layers=mtp,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=None if kind == "mla" else kv_heads,
        head_dim=head_dim,
        kv=_kv_sizes(config, kind, kinds, head_dim, kv_heads),
        context_length=context_length(config),
        dtype=_dtype(config),
        quantization=quantization,
        num_routed_experts=moe.experts if moe else None,
        num_experts_per_token=moe.per_token if moe else None,
        num_moe_layers=len(moe.moe_layers) if moe else None,
        notes=tuple(notes),
    )
