"""Model profiles: the built-in ones, validation errors, user folders, inventory overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyinfra_sglang.serving.memory_fit import holds
from pyinfra_sglang.serving.profiles import (
    PROFILE_FIELDS,
    Profile,
    ProfileError,
    available_profiles,
    load_profile,
    load_profile_file,
    merge_overrides,
)

BUILTIN = ["dense-bf16", "glm-5-nvfp4", "glm-5-nvfp4-dense"]


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_builtin_profiles_load():
    assert list(available_profiles()) == BUILTIN
    for name in BUILTIN:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.source.endswith(f"data/profiles/{name}.toml")


def test_reference_profile():
    profile = load_profile("glm-5-nvfp4")
    assert profile.model == "nvidia/GLM-5-NVFP4"
    assert profile.quantization == "modelopt_fp4"
    assert profile.trust_remote_code is True
    assert profile.sparse_attention_prefill_backend is None  # per architecture, below
    assert profile.attention_backend is None
    sm100, sm120 = profile.for_arch("sm_100"), profile.for_arch("sm_120")
    assert (sm100.sparse_attention_prefill_backend, sm100.sparse_attention_decode_backend) == (
        "trtllm",
        "trtllm",
    )
    assert (sm120.sparse_attention_prefill_backend, sm120.sparse_attention_decode_backend) == (
        "flashinfer_sparse_mla",
        "flashinfer_sparse_mla",
    )
    assert sm100.kv_cache_dtype == sm120.kv_cache_dtype == "fp8_e4m3"
    assert (sm100.min_sglang_version, sm120.min_sglang_version) == ("0.5.9", "0.5.17")
    assert profile.fallback_profile == "glm-5-nvfp4-dense"
    assert profile.mem_fraction_static == 0.92
    assert (profile.cuda_graph, profile.cuda_graph_max_bs) == (True, 64)
    assert profile.chunked_prefill_size == 8192
    assert (profile.reasoning_parser, profile.tool_call_parser) == ("glm45", "glm47")
    assert profile.disable_shared_experts_fusion is True
    assert profile.watchdog_timeout_s == 1800
    assert profile.start_timeout_s == 1200
    # The real checkpoint at the pinned revision (docs/sources.md, GLM-5-NVFP4 checkpoint):
    # 460.8 GB, 78 layers + 1 MTP layer; the floor follows from it (memory_fit.py), no fixed
    # total.
    assert profile.min_total_gpu_memory_gb is None
    assert (profile.weights_gb, profile.num_layers, profile.mtp_layers) == (460.8, 78, 1)
    assert profile.kv_bytes_per_token == {"fp8_e4m3": 61464, "bf16": 100152}
    # trtllm keeps the raw MLA layout, 576 B a layer in fp8 against 656 (docs/sources.md,
    # SGLang releases, read from their wheels): (576 + 132) x 78.
    assert profile.kv_bytes_per_token_by_backend == {"trtllm": {"fp8_e4m3": 55224}}
    assert (576 + 132) * 78 == 55224 and (656 + 132) * 78 == 61464
    assert profile.kv_split_over_tp is False and profile.min_kv_tokens == 131072
    assert profile.mtp is False  # MTP is an option, off by default
    assert profile.min_sglang_version == "0.5.9"
    # Pinned: every host, every node of a group, serves the same weights.
    assert profile.revision == "dc54ff55a7e9e71b85db953d8bc22eca894b44c6"


def test_a_profile_pins_its_own_models_commit_only(tmp_path):
    from pyinfra_sglang.model_files.model_snapshot import model_revision

    profile = load_profile("glm-5-nvfp4")
    pinned = profile.revision
    # Another model (a Hub copy, a local path) does not inherit the reference model's commit,
    # unless the override names one for it.
    assert merge_overrides(profile, {"model": "other-org/GLM-5-NVFP4"}).revision is None
    assert merge_overrides(profile, {"model": "/models/glm-5"}).revision is None
    assert merge_overrides(profile, {"model": "o/m", "revision": "b" * 40}).revision == "b" * 40
    assert merge_overrides(profile, {"cuda_graph_max_bs": 32}).revision == pinned
    assert profile.for_arch("sm_120").revision == pinned
    # The inventory's sglang_model_revision wins over the profile's; neither: main.
    assert model_revision("v1.0", pinned) == "v1.0"
    assert model_revision(None, pinned) == pinned
    assert model_revision(None, None) == "main"
    for text, problem in (
        ('model = "o/m"\nrevision = "main"\n', "revision = 'main': String should match"),
        ('model = "/models/m"\nrevision = "' + "c" * 40 + '"\n', "model /models/m is a local"),
    ):
        path = write(tmp_path, "pinned", text + "min_total_gpu_memory_gb = 1\n")
        with pytest.raises(ProfileError, match=problem):
            load_profile_file(path)


@pytest.mark.parametrize("name", ["glm-5-nvfp4", "glm-5-nvfp4-dense"])
def test_glm5_keeps_deepgemm_off_on_sm120_in_every_release(name):
    """SGLang turns JIT DeepGEMM on for SM120 before 0.5.13 and again from 0.5.20, where its
    pinned sgl-deep-gemm has SM120 kernels; only 0.5.13 .. 0.5.19 turn it off themselves
    (docs/sources.md, SGLang releases, read from their wheels). Both GLM-5 profiles keep it
    off there whatever the release, one value for all; SM100 is left to SGLang."""
    profile = load_profile(name)
    assert profile.arch["sm_120"].env == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert profile.for_arch("sm_120").env == {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    assert "SGLANG_ENABLE_JIT_DEEPGEMM" not in profile.for_arch("sm_100").env


@pytest.mark.parametrize("arch", ["sm_100", "sm_120"])
def test_dense_fallback_differs_from_the_reference_only_in_attention(arch):
    # The KV bytes of the trtllm layout: the dense profile runs no sparse backend.
    skip = {"name", "source", "description", "arch", "fallback_profile", "min_sglang_version"}
    skip |= {"kv_bytes_per_token_by_backend"}
    sparse = load_profile("glm-5-nvfp4").for_arch(arch).model_dump(exclude=skip)
    dense = load_profile("glm-5-nvfp4-dense").for_arch(arch).model_dump(exclude=skip | {"env"})
    sparse.pop("env")
    differ = {key for key in sparse if sparse[key] != dense[key]}
    assert differ == {
        "attention_backend",
        "kv_cache_dtype",
        "sparse_attention_prefill_backend",
        "sparse_attention_decode_backend",
    }
    assert (dense["attention_backend"], dense["kv_cache_dtype"]) == ("flashinfer", "bf16")
    assert dense["sparse_attention_prefill_backend"] is None


def test_generic_dense_profile_is_modest_and_takes_all_gpus():
    profile = load_profile("dense-bf16")
    assert profile.tp_size is None
    assert profile.quantization is None
    assert profile.sparse_attention_prefill_backend is None
    # Its placeholder (Qwen3-8B, 16.4 GB in bf16) fits one 24 GB GPU with its KV floor.
    assert profile.weights_gb == 16.4 and profile.min_total_gpu_memory_gb is None
    assert holds(profile, 1, 24) and not holds(profile, 1, 16)


def test_unknown_key_names_the_file_and_suggests(tmp_path):
    path = write(
        tmp_path, "mine", 'model = "a/b"\nmin_total_gpu_memory_gb = 10\ncuda_grap = true\n'
    )
    with pytest.raises(ProfileError) as error:
        load_profile("mine", [tmp_path])
    message = str(error.value)
    assert f"invalid profile mine ({path})" in message
    assert "cuda_grap: unknown key (did you mean cuda_graph?)" in message


def test_bad_values_are_all_named_with_their_values(tmp_path):
    write(
        tmp_path,
        "mine",
        'model = "a/b"\nmin_total_gpu_memory_gb = 10\nmem_fraction_static = 1.5\n'
        'cuda_graph_max_bs = "many"\nmin_sglang_version = "0.5"\n',
    )
    with pytest.raises(ProfileError) as error:
        load_profile("mine", [tmp_path])
    message = str(error.value)
    assert "mem_fraction_static = 1.5: Input should be less than 1" in message
    assert "cuda_graph_max_bs = 'many'" in message
    assert "min_sglang_version = '0.5': not a release number" in message


def test_missing_required_fields(tmp_path):
    write(tmp_path, "mine", 'description = "nothing else"\n')
    with pytest.raises(ProfileError, match=r"model: Field required"):
        load_profile("mine", [tmp_path])
    # A model without its size, or with both kinds of floor: the two ways are named.
    write(tmp_path, "mine", 'model = "a/b"\n')
    with pytest.raises(ProfileError, match=r"set weights_gb .* or min_total_gpu_memory_gb"):
        load_profile("mine", [tmp_path])
    write(tmp_path, "mine", 'model = "a/b"\nweights_gb = 16\nmin_total_gpu_memory_gb = 24\n')
    with pytest.raises(ProfileError, match=r"weights_gb \(16\) and min_total_gpu_memory_gb \(24\)"):
        load_profile("mine", [tmp_path])
    write(tmp_path, "mine", 'model = "a/b"\nweights_gb = 16\nmin_kv_tokens = 4096\n')
    with pytest.raises(ProfileError, match="min_kv_tokens is set but kv_bytes_per_token is not"):
        load_profile("mine", [tmp_path])


def test_graph_size_without_graphs(tmp_path):
    write(
        tmp_path,
        "mine",
        'model = "a/b"\nmin_total_gpu_memory_gb = 10\ncuda_graph = false\ncuda_graph_max_bs = 8\n',
    )
    with pytest.raises(
        ProfileError,
        match='cuda_graph_max_bs is set but cuda_graph is false.*"cuda_graph_max_bs": null',
    ):
        load_profile("mine", [tmp_path])


def test_api_key_in_extra_args_is_refused(tmp_path):
    write(
        tmp_path,
        "mine",
        'model = "a/b"\nmin_total_gpu_memory_gb = 10\nextra_args = ["--api-key=x"]\n',
    )
    with pytest.raises(
        ProfileError, match=r"extra_args = \[.*\]: --api-key must not be on the command"
    ):
        load_profile("mine", [tmp_path])


def test_invalid_toml_names_the_file(tmp_path):
    path = write(tmp_path, "broken", "model = \n")
    with pytest.raises(ProfileError, match=rf"profile broken \({path}\): not valid TOML"):
        load_profile_file(path)


def test_name_key_is_refused(tmp_path):
    write(tmp_path, "mine", 'name = "other"\nmodel = "a/b"\nmin_total_gpu_memory_gb = 10\n')
    with pytest.raises(ProfileError, match="key 'name' is not allowed"):
        load_profile("mine", [tmp_path])


def test_user_profile_folder_adds_and_shadows(tmp_path):
    user = tmp_path / "profiles"
    write(user, "tiny", 'model = "org/tiny"\nmin_total_gpu_memory_gb = 4\n')
    mine = write(user, "dense-bf16", 'model = "org/other"\nmin_total_gpu_memory_gb = 8\n')
    profiles = available_profiles([user])
    assert list(profiles) == ["dense-bf16", "glm-5-nvfp4", "glm-5-nvfp4-dense", "tiny"]
    assert profiles["dense-bf16"] == str(mine)
    assert load_profile("tiny", [user]).model == "org/tiny"
    assert load_profile("dense-bf16", [user]).model == "org/other"
    assert load_profile("dense-bf16").model == "Qwen/Qwen3-8B"
    # A folder that does not exist is skipped, not an error.
    assert load_profile("glm-5-nvfp4", [tmp_path / "nowhere"]).name == "glm-5-nvfp4"


def test_unknown_profile_lists_the_known_ones(tmp_path):
    with pytest.raises(
        ProfileError, match=r"no profile 'glm-5-fp4' \(did you mean glm-5-nvfp4\?\)"
    ):
        load_profile("glm-5-fp4", [tmp_path])


def test_merge_overrides():
    profile = load_profile("glm-5-nvfp4")
    merged = merge_overrides(profile, {"model": "/models/glm-5", "cuda_graph_max_bs": 32})
    assert (merged.model, merged.cuda_graph_max_bs) == ("/models/glm-5", 32)
    assert (merged.name, merged.source) == (profile.name, profile.source)
    assert merged.quantization == "modelopt_fp4"
    assert profile.model == "nvidia/GLM-5-NVFP4"  # the loaded profile is unchanged
    assert merge_overrides(profile, {}) is profile
    assert merge_overrides(profile, {"min_sglang_version": None}).min_sglang_version is None


def test_merge_overrides_rejects_unknown_keys_and_bad_values():
    profile = load_profile("glm-5-nvfp4")
    with pytest.raises(ProfileError) as error:
        merge_overrides(profile, {"modle": "x", "tp_size": 0})
    message = str(error.value)
    assert "invalid profile glm-5-nvfp4" in message and "with overrides" in message
    assert "modle: unknown key (did you mean model?)" in message
    assert "tp_size = 0: Input should be greater than or equal to 1" in message


def test_profile_fields_exclude_file_identity():
    assert "name" not in PROFILE_FIELDS and "source" not in PROFILE_FIELDS
    assert "model" in PROFILE_FIELDS
    assert set(Profile.model_fields) == PROFILE_FIELDS | {"name", "source"}


@pytest.mark.parametrize(
    ("extra_args", "named"),
    [
        (["--host", "0.0.0.0"], "--host is set by pyinfra-sglang"),
        (["--port=8000"], "--port is set by pyinfra-sglang"),
        (["--ho", "0.0.0.0"], "--ho (argparse reads it as --host)"),
        (["--api-k=x"], "--api-k (argparse reads it as --api-key) must not be on the command"),
        (["--admin-api-key", "x"], "--admin-api-key must not be on the command line"),
        (["--config=/x.yaml"], "--config is set"),
        (["--model-path", "x"], "--model-path is set"),
        (["--tensor-parallel-size", "2"], "--tensor-parallel-size is set"),
        (["--nccl-init-addr", "h:1"], "--nccl-init-addr is set"),
        (["--nsa-prefill-backend", "x"], "--nsa-prefill-backend is set"),
    ],
)
def test_extra_args_cannot_set_managed_flags(tmp_path, extra_args, named):
    args = ", ".join(f'"{arg}"' for arg in extra_args)
    write(tmp_path, "mine", f'model = "a/b"\nmin_total_gpu_memory_gb = 10\nextra_args = [{args}]\n')
    with pytest.raises(ProfileError, match="extra_args") as refused:
        load_profile("mine", [tmp_path])
    assert named in str(refused.value)
    with pytest.raises(ProfileError, match="extra_args"):
        merge_overrides(load_profile("dense-bf16"), {"extra_args": extra_args})


def test_extra_args_of_unmanaged_flags_pass():
    args = ["--disable-radix-cache", "--log-level=debug", "--max-total-tokens", "65536", "--"]
    assert merge_overrides(load_profile("dense-bf16"), {"extra_args": args}).extra_args == args


@pytest.mark.parametrize("field", ["model", "served_model_name", "quantization", "kv_cache_dtype"])
@pytest.mark.parametrize("character", ["\n", "\r", "\x00", "\t", "\x7f"])
def test_control_characters_are_refused_in_what_goes_into_files(field, character):
    with pytest.raises(ProfileError, match="control characters"):
        merge_overrides(load_profile("dense-bf16"), {field: f"x{character}y"})
    with pytest.raises(ProfileError, match="control characters"):
        merge_overrides(load_profile("dense-bf16"), {"extra_args": [f"--x{character}"]})


def test_the_description_may_span_lines(tmp_path):
    text = 'description = """two\nlines"""\nmodel = "a/b"\nmin_total_gpu_memory_gb = 10\n'
    write(tmp_path, "mine", text)
    assert load_profile("mine", [tmp_path]).description == "two\nlines"


@pytest.mark.parametrize("name", ["../../x", "../x", "/tmp/x", "a/b", "x.toml/..", "", "X"])
def test_profile_names_cannot_leave_the_profile_folders(tmp_path, name):
    # A file that a path-like name would reach: it must not be loaded.
    (tmp_path / "x.toml").write_text('model = "evil/model"\nmin_total_gpu_memory_gb = 1\n')
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    with pytest.raises(ProfileError, match="not a profile name"):
        load_profile(name, [folder])


def test_a_binary_profile_file_is_a_clear_error(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_bytes(b"\xff\xfe\x00\x01 not text")
    with pytest.raises(ProfileError, match=r"mine.toml is not UTF-8 text"):
        load_profile("mine", [tmp_path])
    with pytest.raises(ProfileError, match="not UTF-8 text"):
        load_profile_file(path)
    path.write_bytes(b"model = 'a'\x00\n")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile_file(path)
    path.write_bytes(b"# " + b"x" * (300 * 1024))
    with pytest.raises(ProfileError, match="larger than 256 KiB"):
        load_profile_file(path)


# --- per-architecture tables and env ------------------------------------------------------


def test_an_inventory_override_wins_on_every_architecture():
    profile = merge_overrides(
        load_profile("glm-5-nvfp4"),
        {"sparse_attention_decode_backend": "flashmla_kv", "env": {"A": "1"}},
    )
    for arch in ("sm_100", "sm_120"):
        resolved = profile.for_arch(arch)
        assert resolved.sparse_attention_decode_backend == "flashmla_kv"
        assert resolved.env == {"A": "1"}
    # What the override did not name still comes from the arch table.
    assert profile.for_arch("sm_120").sparse_attention_prefill_backend == "flashinfer_sparse_mla"


def test_arch_env_goes_over_the_profile_env_and_min_release_takes_the_later(tmp_path):
    write(
        tmp_path,
        "mine",
        'model = "a/b"\nmin_total_gpu_memory_gb = 10\nmin_sglang_version = "0.5.12"\n'
        'env = { A = "top", B = "top" }\n'
        '[arch.sm_90]\nenv = { B = "hopper" }\nmin_sglang_version = "0.5.10"\n'
        '[arch.sm_120]\nmin_sglang_version = "0.5.20"\nkv_cache_dtype = "fp8_e4m3"\n',
    )
    profile = load_profile("mine", [tmp_path])
    hopper, sm120 = profile.for_arch("sm_90"), profile.for_arch("sm_120")
    assert hopper.env == {"A": "top", "B": "hopper"} and hopper.min_sglang_version == "0.5.12"
    assert sm120.min_sglang_version == "0.5.20" and sm120.kv_cache_dtype == "fp8_e4m3"
    assert profile.for_arch("sm_80") is profile and profile.for_arch(None) is profile


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('archs = ["sm_100"]\n[arch.sm_120]\nkv_cache_dtype = "bf16"\n', "not in archs"),
        ('[arch.sm_120]\nmodel = "x/y"\n', "arch[sm_120][model]: unknown key"),
        ('[arch.sm120]\nkv_cache_dtype = "bf16"\n', "arch[sm120]"),
        ('env = { "BAD-NAME" = "1" }\n', "env[BAD-NAME]"),
        ('env = { A = "line\\nbreak" }\n', "control characters"),
        ("cuda_graph = false\n[arch.sm_90]\ncuda_graph_max_bs = 8\n", "cuda_graph is false"),
    ],
)
def test_bad_arch_tables_and_env_are_refused(tmp_path, text, problem):
    write(tmp_path, "mine", 'model = "a/b"\nmin_total_gpu_memory_gb = 10\n' + text)
    with pytest.raises(ProfileError, match=re.escape(problem)):
        load_profile("mine", [tmp_path])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model = " + "[" * 60000 + "]" * 60000, "nested 60000 deep"),
        ("a" + ".b" * 5000 + " = 1", "more than 16 dotted parts"),
        ('model = "m"\nmin_total_gpu_memory_gb = inf\n', "min_total_gpu_memory_gb"),
        ('model = "m"\nweights_gb = 1e-320\n', "weights_gb"),
        ('model = "m"\nmtp = "yes"\n', "mtp"),
        ('model = "m"\nkv_bytes_per_token = { bf16 = -1 }\n', "kv_bytes_per_token"),
    ],
)
def test_hostile_profile_files_are_refused_with_a_profile_error(tmp_path, text, message):
    """Issue 35 N6/N7: a RecursionError traceback, an OverflowError, quadratic memory, and
    values that validated but could not serve (1e-320 GB, "yes" as true, negative bytes)."""
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message):
        load_profile_file(path)
