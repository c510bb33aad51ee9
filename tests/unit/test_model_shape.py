"""A model sized from its own config.json (pyinfra_sglang/model_shape/) against what its
authors and the Hub publish: the configs are the models' real files
(tests/fixtures/model-configs/, SOURCES.md says where each was read and quotes each
published number)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyinfra_sglang.model_shape.profile_values import SIZE_FIELDS, profile_values
from pyinfra_sglang.model_shape.shape import ModelShapeError, context_length, shape_of
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"


def shape(name: str):
    return shape_of(json.loads((CONFIGS / name / "config.json").read_text()))


# Published parameter counts, billions (SOURCES.md): the model card's or README's, of the
# model without its MTP layers where the authors count them apart (DeepSeek-V3 "671B ...
# and 14B of the Multi-Token Prediction (MTP) Module", GLM-5 "744B").
PUBLISHED_TOTAL = {
    "meta-llama--Llama-3.1-8B": 8,
    "meta-llama--Llama-3.1-70B": 70,
    "meta-llama--Llama-3.1-405B": 405,
    "Qwen--Qwen3-8B": 8.2,
    "Qwen--Qwen3-32B": 32.8,
    "Qwen--Qwen3-30B-A3B": 30.5,
    "Qwen--Qwen3-235B-A22B": 235,
    "deepseek-ai--DeepSeek-V3": 671,
    "deepseek-ai--DeepSeek-R1": 671,
    "openai--gpt-oss-120b": 117,
    "openai--gpt-oss-20b": 21,
    "zai-org--GLM-5": 744,
}
FAMILIES = {name.split("--")[1].split("-")[0] for name in PUBLISHED_TOTAL}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_the_parameters_match_the_published_count_within_one_percent(name):
    computed = shape(name).main_params / 1e9
    assert computed == pytest.approx(PUBLISHED_TOTAL[name], rel=0.01)


def test_six_models_of_four_families_are_checked():
    assert len(PUBLISHED_TOTAL) >= 6 and len(FAMILIES) >= 4, FAMILIES


# The Hub's own count of the checkpoint's tensors (its API's safetensors.parameters, read in
# SOURCES.md): exact, not rounded. gpt-oss's U8 count is its MXFP4 blocks counted one per
# weight plus one e8m0 scale per 32 weights.
HUB_COUNTS = {
    "meta-llama--Llama-3.1-8B-Instruct": {"BF16": 8030261248},
    "Qwen--Qwen3-32B": {"BF16": 32762123264},
    "openai--gpt-oss-120b": {"BF16": 2167371072, "U8": 118244966400},
    "openai--gpt-oss-20b": {"BF16": 1804459584, "U8": 19707494400},
}


@pytest.mark.parametrize("name", sorted(HUB_COUNTS))
def test_the_parameters_equal_the_hubs_tensor_count(name):
    model = shape(name)
    plain = sum(p.params for p in model.parts if not p.quantized)
    packed = sum(p.params for p in model.parts if p.quantized)
    counts = HUB_COUNTS[name]
    assert plain == counts["BF16"]
    assert packed + packed // 32 == counts.get("U8", 0)


# Published active parameters, billions: conventions differ (the embedding row a token
# reads counted or not), so within 10%. This project counts what a decoded token reads of
# memory: its experts, the output head, not the embedding table.
PUBLISHED_ACTIVE = {
    "Qwen--Qwen3-30B-A3B": 3.3,
    "Qwen--Qwen3-235B-A22B": 22,
    "deepseek-ai--DeepSeek-V3": 37,
    "openai--gpt-oss-120b": 5.1,
    "openai--gpt-oss-20b": 3.6,
    "zai-org--GLM-5": 40,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_the_active_parameters_are_near_the_published_ones(name):
    assert shape(name).active_params / 1e9 == pytest.approx(PUBLISHED_ACTIVE[name], rel=0.1)


def test_a_dense_model_reads_every_weight_but_the_embedding_per_token():
    llama = shape("meta-llama--Llama-3.1-8B")
    embedding = 128256 * 4096
    assert llama.active_params == llama.params - embedding
    assert llama.weight_bytes == 2 * llama.params  # bf16
    assert llama.num_routed_experts is None and not llama.is_mla


def test_the_weight_bytes_follow_the_quantization():
    deepseek = shape("deepseek-ai--DeepSeek-V3")  # block FP8, 128 x 128 blocks
    assert deepseek.quantization == "fp8"
    quantized = sum(p.params for p in deepseek.parts if p.quantized)
    plain = deepseek.params - quantized
    assert deepseek.weight_bytes == pytest.approx(quantized * (1 + 4 / 16384) + 2 * plain, abs=16)
    gpt_oss = shape("openai--gpt-oss-120b")  # MXFP4 on the experts only
    assert [p.name for p in gpt_oss.parts if p.quantized] == ["routed experts"]
    # 0.5 byte per weight and an e8m0 scale per 32: the checkpoint is ~65 GB.
    assert gpt_oss.weight_bytes / 1e9 == pytest.approx(65.25, abs=0.01)


# KV bytes per token as SGLang 0.5.17's pool configurator sizes a token (docs/sources.md,
# "Model files"): Llama-3.1-8B 131,072 (32 layers x 8 heads x (128 + 128) x 2), DeepSeek-V3
# 70,272 (61 x (512 + 64) x 2), gpt-oss-120b ~66,355 (18 full + 0.8 x 18 sliding layers x
# 2,048 B), GLM-5 as its shipped profile states it (DSA: the indexer's 132 B a layer, fp8
# scales beyond trtllm).
@pytest.mark.parametrize(
    ("name", "auto"),
    [
        ("meta-llama--Llama-3.1-8B", 131072),
        ("deepseek-ai--DeepSeek-V3", 70272),
        ("openai--gpt-oss-120b", 66355),
        ("Qwen--Qwen3-32B", 64 * 8 * 256 * 2),
    ],
)
def test_kv_bytes_per_token_are_sglangs(name, auto):
    model = shape(name)
    assert model.kv.per_dtype["auto"] == auto
    assert model.kv.per_dtype["fp8_e4m3"] == round(auto / 2)


def test_glm5_kv_and_layers_equal_its_profiles_numbers():
    glm = shape("zai-org--GLM-5")
    profile = load_profile("glm-5-nvfp4")
    assert glm.num_layers == profile.num_layers and glm.mtp_layers == profile.mtp_layers
    assert glm.kv.per_dtype["bf16"] == profile.kv_bytes_per_token["bf16"]
    assert glm.kv.per_dtype["fp8_e4m3"] == profile.kv_bytes_per_token["fp8_e4m3"]
    assert (
        glm.kv.by_backend["trtllm"]["fp8_e4m3"]
        == (profile.kv_bytes_per_token_by_backend["trtllm"]["fp8_e4m3"])
    )
    assert glm.is_mla and glm.num_routed_experts == profile.num_routed_experts
    assert glm.hidden_size == profile.hidden_size


def test_context_length_is_read_as_sglang_reads_it():
    assert shape("meta-llama--Llama-3.1-8B").context_length == 131072  # llama3 rope: as is
    assert shape("Qwen--Qwen3-32B").context_length == 40960
    assert shape("deepseek-ai--DeepSeek-V3").context_length == 163840  # yarn with original
    # A rope factor without an original length multiplies; the first key SGLang reads wins.
    assert context_length({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4}}) == 16384
    assert context_length({"seq_length": 2048, "max_position_embeddings": 8192}) == 2048


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"layer_types": ["linear_attention"] * 64}, "linear_attention"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "bitsandbytes"),
        ({"torch_dtype": "float8"}, "torch_dtype"),
        ({"num_hidden_layers": "64"}, "num_hidden_layers"),
    ],
)
def test_a_config_it_cannot_size_is_refused_naming_the_key(change, named):
    config = json.loads((CONFIGS / "Qwen--Qwen3-32B" / "config.json").read_text())
    config.update(change)
    with pytest.raises(ModelShapeError, match=named):
        shape_of(config)


def test_the_values_size_a_profile_that_validates():
    qwen = shape("Qwen--Qwen3-32B")
    values = profile_values(qwen, weight_bytes=65_535_000_000)
    assert tuple(values) == SIZE_FIELDS
    assert values["weights_gb"] == 65.5  # the checkpoint's bytes win over the computed
    profile = merge_overrides(load_profile("glm-5-nvfp4"), {"model": "Qwen/Qwen3-32B", **values})
    # Nothing of GLM-5 stays: no experts, a KV cache split by head, no DSA layout.
    assert profile.num_routed_experts is None and profile.kv_split_over_tp
    assert profile.kv_bytes_per_token_by_backend == {} and profile.mtp_layers == 0
    assert profile.num_key_value_heads == 8 and profile.num_attention_heads == 64


@pytest.mark.parametrize(
    ("quantization", "per_weight"),
    [
        # GPTQ/AWQ 4-bit, groups of 128: half a byte, plus an fp16 scale and a 4-bit zero a
        # group.
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, 0.5 + (2 + 0.5) / 128),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, 0.5 + (2 + 0.5) / 128),
        ({"quant_method": "gptq", "bits": 8, "group_size": 64}, 1 + (2 + 1) / 64),
        # ModelOpt NVFP4 (quant_algo at the top or in its config_groups), an fp8 scale a 16.
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}, 0.5 + 1 / 16),
    ],
)
def test_integer_and_fp4_formats_price_their_groups(quantization, per_weight):
    config = json.loads((CONFIGS / "meta-llama--Llama-3.1-8B" / "config.json").read_text())
    model = shape_of({**config, "quantization_config": quantization})
    quantized = sum(p.params for p in model.parts if p.quantized)
    plain = model.params - quantized
    assert [p.name for p in model.parts if p.quantized] == ["attention", "dense MLP"]
    assert model.weight_bytes == pytest.approx(quantized * per_weight + 2 * plain, abs=8)


def test_modules_left_unquantized_stay_in_the_models_dtype():
    config = json.loads((CONFIGS / "meta-llama--Llama-3.1-8B" / "config.json").read_text())
    quantization = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "exclude_modules": ["lm_head", "model.layers.*.self_attn*"],
    }
    model = shape_of({**config, "quantization_config": quantization})
    assert [p.name for p in model.parts if p.quantized] == ["dense MLP"]


@pytest.mark.parametrize(
    "change",
    [
        {"n_routed_experts": "256", "num_experts_per_tok": 8, "moe_intermediate_size": 64},
        {"num_hidden_layers": 10**12},
        {"hidden_size": -1},
        {"head_dim": 1.5},
        {"mlp_only_layers": [[1]], "num_experts": 8, "num_experts_per_tok": 2},
        {"rope_scaling": {"factor": "inf?"}},
        {"rope_scaling": {"factor": float("inf")}},
        {"kv_lora_rank": [512]},
        {"quantization_config": {"quant_method": "gptq", "bits": "four"}},
    ],
)
def test_a_hostile_config_is_refused_as_not_a_size(change):
    config = json.loads((CONFIGS / "Qwen--Qwen3-32B" / "config.json").read_text())
    with pytest.raises(ModelShapeError):
        shape_of({**config, **change})
