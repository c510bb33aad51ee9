"""Rendering the SGLang service: argv per profile x SGLang release x GPUs, the fit and version
checks, where secrets go, the files' shape and determinism, and `pyinfra-sglang render`."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from unittest.mock import patch

import pytest

from pyinfra_sglang import paths
from pyinfra_sglang.cli.main import main
from pyinfra_sglang.serving.layout import Layout
from pyinfra_sglang.serving.placement import (
    GpuFitError,
    GpuSet,
    NodePosition,
    Placement,
    check_arch,
    check_fit,
    place,
    tp_size_for,
)
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides
from pyinfra_sglang.serving.render import (
    EnvSpec,
    RenderError,
    RouterSpec,
    Secrets,
    ServiceSpec,
    cache_dirs,
    config_entries,
    exec_start,
    render_config_yaml,
    render_env,
    render_router_files,
    render_router_unit,
    render_service_files,
    render_unit,
    router_args,
    router_launcher,
    server_args,
    systemd_quote,
)
from pyinfra_sglang.serving.sglang_flags import FlagVersionError, flag_for, flag_table
from pyinfra_sglang.versions import Version, parse_version

VENV = "/opt/sglang/venv"
CONFIG = "/etc/sglang/sglang.yaml"
SPARSE = [
    "--nsa-prefill-backend",
    "--nsa-decode-backend",
    "--dsa-prefill-backend",
    "--dsa-decode-backend",
]
API_KEY = "sk-test-Abc123:#&\"'x"
HF_TOKEN = "hf_TestTokenValue123"


def placed_args(
    profile,
    version: str,
    tp_size: int,
    host: str,
    port: int,
    config_path: str | None,
    nnodes: int = 1,
    node_rank: int = 0,
    dist_init_addr: str | None = None,
    revision: str | None = None,
) -> list[str]:
    """server_args for a Placement made of these values as they are: render's own checks
    (multi-node values, releases, paths) are what these tests hold, not place()'s fit."""
    gpus_per_node = max(1, tp_size // nnodes)
    placement = Placement(
        profile=profile,
        tp_size=tp_size,
        layout=Layout(tp_size),
        gpus=GpuSet(gpus_per_node, 80.0),
        node=NodePosition(nnodes, node_rank, dist_init_addr),
        sglang_version=version,
    )
    return server_args(placement, host, port, config_path, revision=revision)


def argv_for(profile_name: str, version: str, gpus: int, arch="sm_100", **kwargs) -> list[str]:
    """The argv of a profile as it runs on ``arch`` (its [arch.*] table applied)."""
    profile = load_profile(profile_name).for_arch(arch)
    return placed_args(
        profile, version, tp_size_for(profile, gpus), "127.0.0.1", 30000, CONFIG, **kwargs
    )


def flags(argv: list[str]) -> dict[str, str | bool]:
    """--flag -> its value, or True for a switch."""
    found: dict[str, str | bool] = {}
    for index, word in enumerate(argv):
        if word.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else "--"
            found[word] = True if following.startswith("--") else following
    return found


def unit_argv(unit: str) -> list[str]:
    """ExecStart of a rendered unit read back as systemd would: continuations joined,
    quotes removed, %% and $$ unescaped."""
    text = unit.split("ExecStart=", 1)[1].replace(" \\\n", " ").split("\n", 1)[0]
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(text)]


def service_files(profile_name="glm-5-nvfp4", version="0.5.23", gpus=8, mask=False, **kwargs):
    """The service's files for a reference-like host; ``kwargs`` override its fields."""
    gpu_fields = {"memory_gb": 96, "arch": "sm_120", "pcie_only": True}
    gpu_fields.update({key: kwargs.pop(key) for key in list(kwargs) if key in gpu_fields})
    secrets = Secrets(kwargs.pop("api_key", API_KEY), kwargs.pop("hf_token", HF_TOKEN))
    node = kwargs.pop("node", NodePosition())
    spec = ServiceSpec(
        placement=place(
            load_profile(profile_name), GpuSet(count=gpus, **gpu_fields), node, version
        ),
        host="127.0.0.1",
        port=30000,
        venv_path=VENV,
        secrets=secrets,
        mask=mask,
    )
    return render_service_files(dataclasses.replace(spec, **kwargs))


# --- versions and flag spellings -----------------------------------------------------


def test_versions_compare_as_releases():
    assert parse_version("0.5.9") < parse_version("0.5.9.post1") < parse_version("0.5.10")
    assert parse_version("0.5.21") > parse_version("0.5.20.post3")
    assert parse_version("0.5.9.post1") == Version(0, 5, 9, 1)
    assert str(parse_version("0.5.9.post1")) == "0.5.9.post1"
    assert str(parse_version("0.5.23")) == "0.5.23"
    for bad in ("0.5", "v0.5.9", "0.5.9rc1", "latest"):
        with pytest.raises(ValueError, match="not a release number"):
            parse_version(bad)


@pytest.mark.parametrize(
    ("version", "prefill", "graph"),
    [
        ("0.5.9", "--nsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.9.post1", "--nsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.12", "--nsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.13", "--dsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.14", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
        ("0.5.20.post1", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
        ("0.5.21", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
        ("0.5.23", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
    ],
)
def test_spelling_per_release(version, prefill, graph):
    assert flag_for("sparse_attention_prefill_backend", version) == prefill
    assert flag_for("sparse_attention_decode_backend", version) == prefill.replace(
        "prefill", "decode"
    )
    assert flag_for("cuda_graph_max_bs", version) == graph


def test_flag_table_is_complete_and_stable():
    table = flag_table()
    assert list(table)[:4] == ["model_path", "served_model_name", "revision", "tp_size"]
    assert list(table)[-1] == "config"
    switches = {intent for intent, entry in table.items() if entry.kind == "switch"}
    assert switches == {
        "trust_remote_code",
        "disable_cuda_graph",
        "disable_shared_experts_fusion",
        "enable_dp_attention",
        "enable_metrics",
    }
    for entry in table.values():
        assert all(s.flag.startswith("--") for s in entry.spellings)


def test_missing_spelling_names_intent_flag_and_release():
    expected = (
        r"SGLang 0.5.8 has no flag for sparse_attention_prefill_backend "
        r"\(--nsa-prefill-backend from 0.5.9"
    )
    with pytest.raises(FlagVersionError, match=expected):
        flag_for("sparse_attention_prefill_backend", "0.5.8")


# --- argv table ------------------------------------------------------------------------

ARGV_TABLE = [
    # profile, SGLang, GPUs, flags expected with values, flags that must be absent
    (
        "glm-5-nvfp4",
        "0.5.9",
        8,
        {
            "--nsa-prefill-backend": "trtllm",
            "--nsa-decode-backend": "trtllm",
            "--cuda-graph-max-bs": "64",
            "--tp-size": "8",
        },
        [
            "--dsa-prefill-backend",
            "--dsa-decode-backend",
            "--cuda-graph-max-bs-decode",
            "--disable-cuda-graph",
        ],
    ),
    (
        "glm-5-nvfp4",
        "0.5.9.post1",
        8,
        {"--nsa-prefill-backend": "trtllm", "--cuda-graph-max-bs": "64"},
        ["--dsa-prefill-backend", "--cuda-graph-max-bs-decode"],
    ),
    (
        "glm-5-nvfp4",
        "0.5.14",
        8,
        {
            "--dsa-prefill-backend": "trtllm",
            "--dsa-decode-backend": "trtllm",
            "--cuda-graph-max-bs-decode": "64",
        },
        ["--nsa-prefill-backend", "--nsa-decode-backend", "--cuda-graph-max-bs"],
    ),
    (
        "glm-5-nvfp4",
        "0.5.23",
        8,
        {
            "--dsa-prefill-backend": "trtllm",
            "--dsa-decode-backend": "trtllm",
            "--cuda-graph-max-bs-decode": "64",
            "--tp-size": "8",
            "--quantization": "modelopt_fp4",
            "--trust-remote-code": True,
            "--mem-fraction-static": "0.92",
            "--chunked-prefill-size": "8192",
            "--reasoning-parser": "glm45",
            "--tool-call-parser": "glm47",
            "--disable-shared-experts-fusion": True,
            "--watchdog-timeout": "1800",
            "--enable-metrics": True,
            "--kv-cache-dtype": "fp8_e4m3",
            "--config": CONFIG,
        },
        [
            "--nsa-prefill-backend",
            "--cuda-graph-max-bs",
            "--attention-backend",
            "--api-key",
        ],
    ),
    ("glm-5-nvfp4", "0.5.23", 4, {"--tp-size": "4"}, []),
    (
        "glm-5-nvfp4-dense",
        "0.5.9",
        8,
        {
            "--attention-backend": "flashinfer",
            "--kv-cache-dtype": "bf16",
            "--cuda-graph-max-bs": "64",
        },
        SPARSE,
    ),
    (
        "glm-5-nvfp4-dense",
        "0.5.23",
        8,
        {
            "--attention-backend": "flashinfer",
            "--kv-cache-dtype": "bf16",
            "--cuda-graph-max-bs-decode": "64",
        },
        SPARSE,
    ),
    (
        "dense-bf16",
        "0.5.8",
        1,
        {"--tp-size": "1", "--model-path": "Qwen/Qwen3-8B"},
        SPARSE
        + ["--quantization", "--trust-remote-code", "--cuda-graph-max-bs", "--disable-cuda-graph"],
    ),
    (
        "dense-bf16",
        "0.5.23",
        2,
        {"--tp-size": "2"},
        SPARSE + ["--cuda-graph-max-bs-decode", "--nnodes"],
    ),
]


@pytest.mark.parametrize(
    ("profile", "version", "gpus", "present", "absent"),
    ARGV_TABLE,
    ids=[f"{p}@{v}x{g}" for p, v, g, _, _ in ARGV_TABLE],
)
def test_argv_table(profile, version, gpus, present, absent):
    argv = argv_for(profile, version, gpus)
    found = flags(argv)
    for flag, value in present.items():
        assert found.get(flag) == value, (flag, argv)
    for flag in absent:
        assert flag not in found, (flag, argv)
    assert len(found) == sum(1 for word in argv if word.startswith("--")), "a flag is repeated"


def test_reference_argv_in_full():
    # The reference deployment: 8x RTX PRO 6000 (sm_120), the newest release read.
    assert argv_for("glm-5-nvfp4", "0.5.23", 8, arch="sm_120") == [
        "--model-path",
        "nvidia/GLM-5-NVFP4",
        "--served-model-name",
        "glm-5",
        "--tp-size",
        "8",
        "--quantization",
        "modelopt_fp4",
        "--trust-remote-code",
        "--dsa-prefill-backend",
        "flashinfer_sparse_mla",
        "--dsa-decode-backend",
        "flashinfer_sparse_mla",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--mem-fraction-static",
        "0.92",
        "--chunked-prefill-size",
        "8192",
        "--cuda-graph-max-bs-decode",
        "64",
        "--disable-shared-experts-fusion",
        "--reasoning-parser",
        "glm45",
        "--tool-call-parser",
        "glm47",
        "--watchdog-timeout",
        "1800",
        "--enable-metrics",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--config",
        CONFIG,
    ]


def test_cuda_graphs_off_renders_the_deprecated_switch_only():
    profile = merge_overrides(
        load_profile("glm-5-nvfp4"), {"cuda_graph": False, "cuda_graph_max_bs": None}
    )
    found = flags(placed_args(profile, "0.5.23", 8, "127.0.0.1", 30000, CONFIG))
    assert found["--disable-cuda-graph"] is True
    assert "--cuda-graph-max-bs" not in found and "--cuda-graph-max-bs-decode" not in found


def test_tp_size_from_gpus_or_profile():
    dense = load_profile("dense-bf16")
    assert tp_size_for(dense, 4) == 4
    assert tp_size_for(dense, 8, nnodes=2) == 16
    fixed = merge_overrides(dense, {"tp_size": 2})
    assert tp_size_for(fixed, 8) == 2
    with pytest.raises(GpuFitError, match="sets tp_size 2, but there are only 1 GPUs"):
        tp_size_for(fixed, 1)


def test_multinode_flags():
    profile = load_profile("glm-5-nvfp4")
    argv = placed_args(
        profile,
        "0.5.23",
        16,
        "0.0.0.0",
        30000,
        CONFIG,
        nnodes=2,
        node_rank=1,
        dist_init_addr="10.0.0.1:5000",
    )
    found = flags(argv)
    assert (found["--nnodes"], found["--node-rank"], found["--dist-init-addr"]) == (
        "2",
        "1",
        "10.0.0.1:5000",
    )
    assert found["--tp-size"] == "16"
    assert "--nnodes" not in flags(argv_for("glm-5-nvfp4", "0.5.23", 8))
    with pytest.raises(RenderError, match="need dist_init_addr"):
        placed_args(profile, "0.5.23", 16, "0.0.0.0", 30000, CONFIG, nnodes=2, node_rank=1)
    with pytest.raises(RenderError, match="node_rank 2 is outside 0..1"):
        placed_args(
            profile,
            "0.5.23",
            16,
            "0.0.0.0",
            30000,
            CONFIG,
            nnodes=2,
            node_rank=2,
            dist_init_addr="10.0.0.1:5000",
        )


def test_config_must_be_yaml_and_may_be_left_out():
    profile = load_profile("dense-bf16")
    with pytest.raises(RenderError, match=r"only .yaml/.yml"):
        placed_args(profile, "0.5.23", 1, "127.0.0.1", 30000, "/etc/sglang/sglang.toml")
    assert "--config" not in placed_args(profile, "0.5.23", 1, "127.0.0.1", 30000, None)


# --- version and fit errors ------------------------------------------------------------


def test_profile_older_than_its_minimum_release():
    expected = r"profile glm-5-nvfp4 needs SGLang 0.5.9 or later; the pinned release is 0.5.8"
    with pytest.raises(FlagVersionError, match=expected):
        argv_for("glm-5-nvfp4", "0.5.8", 8)


def test_intent_the_release_lacks_is_an_error_naming_flags_and_release():
    # Without the profile's minimum, the flag table itself refuses sparse backends on 0.5.8.
    profile = merge_overrides(
        load_profile("glm-5-nvfp4").for_arch("sm_100"), {"min_sglang_version": None}
    )
    with pytest.raises(FlagVersionError) as error:
        placed_args(profile, "0.5.8", 8, "127.0.0.1", 30000, CONFIG)
    message = str(error.value)
    assert message.startswith("profile glm-5-nvfp4: SGLang 0.5.8 has no flag for ")
    assert (
        "sparse_attention_prefill_backend = 'trtllm' (--nsa-prefill-backend from 0.5.9" in message
    )
    assert "sparse_attention_decode_backend = 'trtllm' (--nsa-decode-backend from 0.5.9" in message
    assert "--dsa-prefill-backend from 0.5.13" in message


@pytest.mark.parametrize(
    ("gpus", "memory_gb", "fits"),
    [(8, 96, True), (5, 96, False), (4, 96, False), (4, 180, True), (2, 141, False)]
    + [(1, 96, False)],
)
def test_fit_of_the_reference_profile(gpus, memory_gb, fits):
    profile = load_profile("glm-5-nvfp4")
    if fits:
        check_fit(profile, gpus, memory_gb)
    else:
        with pytest.raises(GpuFitError, match=rf"does not fit {gpus} x {memory_gb} GB"):
            check_fit(profile, gpus, memory_gb)


def test_fit_error_says_need_have_and_what_to_do():
    with pytest.raises(GpuFitError) as error:
        check_fit(load_profile("glm-5-nvfp4"), 4, 96)
    # Per GPU at the planned tensor-parallel size: the weights' share (460.8 GB = 429.2 GiB,
    # less the MTP layer's 1/79 with MTP off, / 4 = 105.9), KV cache for the profile's 131072
    # tokens (no dtype at the top level: the largest listed, bf16, 100152 B each: 12.2), the
    # 8 GiB overhead, against 0.92 x 96.
    assert str(error.value) == (
        "profile glm-5-nvfp4 does not fit 4 x 96 GB at tensor-parallel size 4: each GPU needs "
        "126.2 GiB (weights 105.9 (460.8 GB less the MTP layer / 4) + KV cache for 131072 "
        "tokens 12.2 + overhead 8.0), but mem_fraction_static 0.92 x 96 GB = 88.3 GiB is what "
        "SGLang gives weights and KV cache. Use 8 GPUs of 96 GB (tensor parallelism needs a GPU "
        "count that splits the model's 64 attention heads; 8, 16, 32, 64 hold it), larger "
        "GPUs, or a profile for a smaller model"
    )


def test_arch_check():
    check_arch(load_profile("glm-5-nvfp4"), "sm_120")
    check_arch(load_profile("dense-bf16"), "sm_80")
    with pytest.raises(GpuFitError, match="runs on sm_100, sm_120; these GPUs are sm_90"):
        check_arch(load_profile("glm-5-nvfp4"), "sm_90")


def test_service_files_apply_the_checks():
    with pytest.raises(GpuFitError):
        service_files(gpus=4)
    with pytest.raises(GpuFitError):
        service_files(arch="sm_90", memory_gb=141)
    # Multi-node: the fit counts the GPUs of every node.
    files = service_files(
        gpus=4, node=NodePosition(nnodes=2, rank=0, dist_init_addr="10.0.0.1:5000")
    )
    assert "--tp-size 8" in files[0].content


# --- secrets ---------------------------------------------------------------------------


def test_api_key_only_in_the_config_file_and_hf_token_only_in_the_env_file():
    unit, env, config = service_files()
    assert API_KEY not in unit.content and HF_TOKEN not in unit.content
    assert "--api-key" not in unit.content and "api-key" not in unit.content
    assert API_KEY not in " ".join(unit_argv(unit.content))
    assert HF_TOKEN not in config.content and API_KEY not in env.content
    assert f"HF_TOKEN={HF_TOKEN}\n" in env.content
    assert read_config(config.content) == {"api-key": API_KEY}
    assert (unit.mode, env.mode, config.mode) == ("644", "600", "600")


def read_config(text: str) -> dict[str, str]:
    # The values are JSON strings, which YAML reads as the same strings.
    entries = [
        line.split(": ", 1) for line in text.splitlines() if line and not line.startswith("#")
    ]
    return {key: json.loads(value) for key, value in entries}


def test_masked_files_hold_no_secret():
    for file in service_files(mask=True):
        assert API_KEY not in file.content and HF_TOKEN not in file.content
    unit, env, config = service_files(mask=True)
    assert "HF_TOKEN=********\n" in env.content
    # Quoted: a bare ******** would read as a YAML alias.
    assert 'api-key: "********"\n' in config.content


def test_without_secrets_the_files_have_none():
    unit, env, config = service_files(api_key=None, hf_token=None)
    assert "\nHF_TOKEN=" not in env.content
    assert read_config(config.content) == {}
    assert config_entries(None) == {}
    # SGLang reads a config file of comments only as no settings.
    assert all(line.startswith("#") for line in config.content.splitlines())


def test_unit_refuses_an_api_key_on_the_command_line():
    profile = load_profile("dense-bf16")
    with pytest.raises(RenderError, match="--api-key must not be on the command line"):
        render_unit(profile, ["--model-path", "x", "--api-key", "secret"], "0.5.23", VENV)


# --- files' shape ----------------------------------------------------------------------


def test_unit_shape():
    unit = service_files()[0].content
    lines = unit.splitlines()
    assert not [line for line in lines if line.startswith("TimeoutStartSec")]  # no effect
    for line in [
        "Type=simple",
        "Restart=on-failure",
        # The HTTP server alone gets SIGTERM and drains; a crash loop stops.
        "KillMode=mixed",
        "TimeoutStopSec=120",
        # 3 whole starts of GLM-5 (start_timeout_s 1200) plus RestartSec 10 each.
        "StartLimitIntervalSec=3630",
        "StartLimitBurst=3",
        "LimitMEMLOCK=infinity",
        "StandardOutput=journal",
        "EnvironmentFile=/etc/sglang/sglang.env",
        "WantedBy=multi-user.target",
    ]:
        assert line in lines, line
    argv = argv_for("glm-5-nvfp4", "0.5.23", 8, arch="sm_120")
    assert unit_argv(unit) == [f"{VENV}/bin/python", "-m", "sglang.launch_server", *argv]
    assert (
        "ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\\n    --model-path "
        in unit
    )


def test_exec_start_quoting():
    assert systemd_quote("nvidia/GLM-5-NVFP4") == "nvidia/GLM-5-NVFP4"
    assert systemd_quote("/models/my model") == '"/models/my model"'
    assert systemd_quote("50%") == "50%%"
    assert systemd_quote("$HOME") == '"$$HOME"'
    assert systemd_quote('a"b\\c') == '"a\\"b\\\\c"'
    words = ["/v/bin/python", "-m", "m", "--model-path", "/models/a b", "--x", "%n$y"]
    assert (
        exec_start(words)
        == '/v/bin/python -m m \\\n    --model-path "/models/a b" \\\n    --x "%%n$$y"'
    )
    with pytest.raises(RenderError, match="control characters"):
        systemd_quote("a\nb")


@pytest.mark.parametrize("character", ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85"])
def test_no_control_character_goes_into_a_unit_or_env_file(character):
    # systemd refuses a unit with a NUL or a CR; a newline would start a new setting.
    with pytest.raises(RenderError, match="control characters"):
        systemd_quote(f"a{character}b")
    with pytest.raises(RenderError, match="control characters"):
        render_env(EnvSpec(VENV, hf_token=f"hf_{character}x"))
    with pytest.raises(RenderError, match="control characters"):
        config_entries(f"sk{character}x")
    with pytest.raises(RenderError, match="control characters"):
        render_router_files(router_spec(worker_urls=(f"http://10.0.0.1:1/{character}",)))
    # The env file never echoes the secret it refuses.
    with pytest.raises(RenderError) as refused:
        render_env(EnvSpec(VENV, hf_token=f"hf_SECRET{character}x"))
    assert "SECRET" not in str(refused.value)


@pytest.mark.parametrize(
    "path", ["/opt/v env", "/opt/v$x", "/opt/v%n", '/opt/"v"', "/opt/v'", "/opt/v\\x", "relative"]
)
def test_venv_path_of_unsafe_characters_is_refused(path):
    with pytest.raises(RenderError, match="letters, digits") as refused:
        render_env(EnvSpec(path))
    assert refused.value.field == "venv_path"


def test_unit_round_trips_odd_model_paths():
    profile = merge_overrides(load_profile("dense-bf16"), {"model": "/models/Qwen 8B (50%)"})
    argv = placed_args(profile, "0.5.23", 1, "127.0.0.1", 30000, CONFIG)
    unit = render_unit(profile, argv, "0.5.23", VENV)
    assert unit_argv(unit)[3:] == argv
    assert "Description=SGLang server (dense-bf16: /models/Qwen 8B (50%%))" in unit


def test_env_file():
    env = render_env(
        EnvSpec(VENV, hf_token=HF_TOKEN, pcie_only=True, cuda_home="/usr/local/cuda-13.1")
    )
    values = dict(line.split("=", 1) for line in env.splitlines() if not line.startswith("#"))
    assert list(values) == sorted(values)
    assert values["NCCL_P2P_LEVEL"] == "PHB"
    assert values["NCCL_IB_DISABLE"] == "1" and values["NCCL_MIN_NCHANNELS"] == "8"
    assert values["CUDA_HOME"] == "/usr/local/cuda-13.1"
    assert values["PATH"].startswith(f"{VENV}/bin:/usr/local/cuda-13.1/bin:")
    for name, folder in cache_dirs().items():
        assert values[name] == folder and folder.startswith("/var/lib/sglang/")
    assert {
        "HF_HOME",
        "FLASHINFER_WORKSPACE_BASE",
        "SGLANG_DG_CACHE_DIR",
        "TRITON_CACHE_DIR",
    } <= set(values)
    nvlinked = render_env(EnvSpec(VENV, pcie_only=False))
    assert (
        "\nNCCL_" not in nvlinked
        and "\nHF_TOKEN=" not in nvlinked
        and "\nCUDA_HOME=" not in nvlinked
    )
    assert cache_dirs("/data/sglang")["HF_HOME"] == "/data/sglang/huggingface"


def test_env_values_are_quoted_when_needed():
    env = render_env(EnvSpec(VENV, hf_token='tok "en" x'))
    assert 'HF_TOKEN="tok \\"en\\" x"\n' in env
    with pytest.raises(RenderError):
        render_env(EnvSpec(VENV, hf_token="a\nb"))
    with pytest.raises(RenderError, match="absolute path"):
        render_env(EnvSpec("relative/venv"))


def router_spec(**fields) -> RouterSpec:
    values = {
        "worker_urls": ("http://10.0.0.1:30000", "http://10.0.0.2:30000"),
        "host": "127.0.0.1",
        "port": 8000,
        "metrics_host": "127.0.0.1",
        "metrics_port": 29000,
        "venv_path": VENV,
    }
    return RouterSpec(**{**values, **fields})


def test_router_unit():
    unit = render_router_unit(router_spec())
    assert unit_argv(unit) == [
        f"{VENV}/bin/python",
        "-m",
        "sglang_router.launch_router",
        "--worker-urls",
        "http://10.0.0.1:30000",
        "http://10.0.0.2:30000",
        "--policy",
        "cache_aware",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        # The metrics listener is a socket of its own (0.3.2 binds it to 0.0.0.0 by default).
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        "29000",
        # Its own default grace, explicit: the unit's stop timeout covers it, plus a margin.
        "--shutdown-grace-period-secs",
        "180",
    ]
    assert "\nTimeoutStopSec=210\n" in unit
    assert "KillMode=control-group" in unit and "Restart=on-failure" in unit
    assert "EnvironmentFile" not in unit  # no key, no environment file
    # Never root, sandboxed, no capability kept on its unprivileged ports.
    for line in ("DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict"):
        assert f"\n{line}\n" in unit
    assert "\nCapabilityBoundingSet=\n" in unit and "AmbientCapabilities" not in unit
    low = render_router_unit(router_spec(port=443))
    assert "\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n" in low
    assert "\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n" in low
    with pytest.raises(RenderError, match="at least one worker"):
        render_router_unit(router_spec(worker_urls=()))


def test_smg_router_unit_runs_its_console_script_with_smg_flags():
    """smg (SGLang >= 0.5.9): `smg launch` and the same flags; with a key, the launcher runs
    `python -m smg` (smg/__main__.py calls smg.cli:main, as the console script does)."""
    smg = router_spec(package="smg", release="1.13.0")
    argv = unit_argv(render_router_unit(smg))
    assert argv[:2] == [f"{VENV}/bin/smg", "launch"]
    assert argv[2:] == router_args(router_spec())
    assert argv[-2:] == ["--shutdown-grace-period-secs", "180"]
    keyed = render_router_files(dataclasses.replace(smg, api_key="sk-ROUTER-key"))
    assert unit_argv(keyed[0].content)[:4] == [
        f"{VENV}/bin/python",
        "-c",
        router_launcher("smg"),
        "launch",
    ]
    assert "runpy.run_module('smg'" in router_launcher("smg")
    assert "sk-ROUTER-key" not in keyed[0].content and "sk-ROUTER-key" in keyed[1].content
    assert "Description=SGLang Model Gateway, smg 1.13.0 (2 worker(s))" in keyed[0].content
    # sglang-router before 0.3.0 has no grace flag; its unit still waits as long.
    old = unit_argv(render_router_unit(router_spec(release="0.2.3")))
    assert "--shutdown-grace-period-secs" not in old
    with pytest.raises(RenderError, match="router package 'nginx'"):
        render_router_unit(router_spec(package="nginx"))


def test_router_api_key_goes_through_a_0600_env_file_never_argv():
    files = render_router_files(router_spec(host="0.0.0.0", api_key="sk-ROUTER-key"))
    unit, env = files
    assert (unit.path, unit.mode) == ("/etc/systemd/system/sglang-router.service", "644")
    assert (env.path, env.mode) == ("/etc/sglang/sglang-router.env", "600")
    assert "sk-ROUTER-key" not in unit.content and "--api-key" not in unit_argv(unit.content)
    assert "EnvironmentFile=/etc/sglang/sglang-router.env" in unit.content
    assert "\nSGLANG_ROUTER_API_KEY=sk-ROUTER-key\n" in env.content
    # The launcher adds the key in-process: python -c LAUNCHER, then the router's arguments.
    argv = unit_argv(unit.content)
    assert argv[:3] == [f"{VENV}/bin/python", "-c", router_launcher()]
    assert argv[3:] == router_args(router_spec(host="0.0.0.0"))
    assert "os.environ.pop('SGLANG_ROUTER_API_KEY')" in router_launcher()
    masked = render_router_files(router_spec(api_key="sk-ROUTER-key", mask=True))
    assert "sk-ROUTER-key" not in "".join(f.content for f in masked)
    assert "SGLANG_ROUTER_API_KEY=********" in masked[1].content


LOGINS = ("http://router:w0rker-Pa55@10.0.0.1:30000", "http://10.0.0.2:30000")


@pytest.mark.parametrize("api_key", [None, "sk-ROUTER-key"])
def test_worker_urls_with_logins_go_through_the_0600_env_file_never_argv(api_key):
    unit, env = render_router_files(router_spec(worker_urls=LOGINS, api_key=api_key))
    assert "w0rker-Pa55" not in unit.content and "10.0.0.2" not in unit.content
    assert "EnvironmentFile=/etc/sglang/sglang-router.env" in unit.content
    assert (env.path, env.mode) == ("/etc/sglang/sglang-router.env", "600")
    assert f'\nSGLANG_ROUTER_WORKER_URLS="{LOGINS[0]} {LOGINS[1]}"\n' in env.content
    argv = unit_argv(unit.content)
    assert "--worker-urls" not in argv
    launcher = router_launcher(worker_urls=True, api_key=bool(api_key))
    assert argv[:3] == [f"{VENV}/bin/python", "-c", launcher]
    assert "os.environ.pop('SGLANG_ROUTER_WORKER_URLS').split()" in launcher
    assert ("SGLANG_ROUTER_API_KEY" in launcher) is bool(api_key)
    # What the launcher's edit of sys.argv gives the router, run here on the env's values.
    edit = launcher.split("; runpy.run_module")[0]
    scope = {}
    environ = {"SGLANG_ROUTER_WORKER_URLS": " ".join(LOGINS), "SGLANG_ROUTER_API_KEY": "k"}
    with patch.dict("os.environ", environ), patch("sys.argv", ["-c", *argv[3:]]):
        exec(edit, scope)
        assert scope["sys"].argv[-3:] == ["--worker-urls", *LOGINS]
    # render's preview ("secrets masked") masks the logins, keeps the URLs readable.
    masked = render_router_files(router_spec(worker_urls=LOGINS, api_key=api_key, mask=True))
    shown = "".join(f.content for f in masked)
    assert "w0rker-Pa55" not in shown and "http://router:********@10.0.0.1:30000" in shown


def test_worker_urls_without_logins_stay_on_the_command_line():
    [unit] = render_router_files(router_spec())
    argv = unit_argv(unit.content)
    assert argv[argv.index("--worker-urls") + 1 : argv.index("--worker-urls") + 3] == [
        "http://10.0.0.1:30000",
        "http://10.0.0.2:30000",
    ]
    assert "EnvironmentFile" not in unit.content


def test_extra_args_cannot_set_managed_flags():
    from pyinfra_sglang.serving.extra_args import managed_server_flags

    profile = load_profile("dense-bf16")
    managed = managed_server_flags()
    assert {"--host", "--port", "--config", "--api-key", "--admin-api-key", "--model"} <= managed
    assert {"--dist-init-addr", "--nnodes", "--node-rank", "--tp-size", "--model-path"} <= managed
    assert {"--tensor-parallel-size", "--nccl-init-addr", "--dsa-prefill-backend"} <= managed
    # Bypassing the profile's own validation (model_copy does not validate): the renderer
    # refuses too.
    for args in (["--host", "0.0.0.0"], ["--ho", "0.0.0.0"], ["--api-k=x"], ["--tp=4"]):
        bad = profile.model_copy(update={"extra_args": args})
        with pytest.raises(RenderError, match="extra_args"):
            placed_args(bad, "0.5.23", 1, "127.0.0.1", 30000, CONFIG)
    fine = profile.model_copy(update={"extra_args": ["--disable-radix-cache", "--log-level=info"]})
    argv = placed_args(fine, "0.5.23", 1, "127.0.0.1", 30000, CONFIG)
    assert argv[-2:] == ["--disable-radix-cache", "--log-level=info"]


@pytest.mark.parametrize(
    "name",
    ["sglang.service.j2", "sglang.env.j2", "sglang-config.yaml.j2", "sglang-router.service.j2"],
)
def test_templates_are_found(name):
    assert Path(paths.template(name)).is_file()


def test_rendering_is_deterministic():
    first = [(f.path, f.content.encode(), f.mode) for f in service_files()]
    second = [(f.path, f.content.encode(), f.mode) for f in service_files()]
    assert first == second
    assert render_config_yaml(API_KEY) == render_config_yaml(API_KEY)
    for file in service_files():
        assert file.content.endswith("\n") and "\n\n\n" not in file.content


# --- pyinfra-sglang render ------------------------------------------------------------


def test_render_command_prints_the_three_files_masked(capsys):
    assert (
        main(
            [
                "render",
                "--profile",
                "glm-5-nvfp4",
                "--gpus",
                "8",
                "--arch",
                "sm_120",
                "--sglang-version",
                "0.5.23",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("# profile glm-5-nvfp4, SGLang 0.5.23, 8 x 96 GB sm_120")
    assert "PCIe only: yes; secrets masked" in out
    for header in [
        "# ==> /etc/systemd/system/sglang.service (mode 644) <==",
        "# ==> /etc/sglang/sglang.env (mode 600) <==",
        "# ==> /etc/sglang/sglang.yaml (mode 600) <==",
    ]:
        assert header in out
    assert "--dsa-prefill-backend flashinfer_sparse_mla" in out
    assert "--kv-cache-dtype fp8_e4m3" in out and "--cuda-graph-max-bs-decode 64" in out
    assert "trtllm" not in out
    assert "NCCL_P2P_LEVEL=PHB" in out  # no topology given: the data's default
    assert "HF_TOKEN=********" in out and 'api-key: "********"' in out
    assert "(set)" not in out
    # As a host without sglang_model_revision gets it: the profile's pinned commit, served
    # offline from the snapshot the model role downloaded.
    assert "    --revision dc54ff55a7e9e71b85db953d8bc22eca894b44c6 \\\n" in out
    assert "\nHF_HUB_OFFLINE=1\n" in out


@pytest.mark.parametrize(
    ("profile", "arch", "version"),
    [
        ("glm-5-nvfp4-dense", "sm_120", "0.5.9"),  # SGLang turns DeepGEMM on: needed
        ("glm-5-nvfp4", "sm_120", "0.5.17"),  # SGLang turns it off itself: redundant
        ("glm-5-nvfp4", "sm_120", "0.5.19"),
        ("glm-5-nvfp4", "sm_120", "0.5.20"),  # on again (pinned deep_gemm has SM120): needed
        ("glm-5-nvfp4", "sm_120", "0.5.23"),
        ("glm-5-nvfp4-dense", "sm_120", "0.5.23"),
        ("glm-5-nvfp4", "sm_100", "0.5.23"),
        ("glm-5-nvfp4-dense", "sm_100", "0.5.9"),
    ],
)
def test_glm5_env_turns_deepgemm_off_on_sm120_for_every_release(capsys, profile, arch, version):
    """The rendered env file keeps JIT DeepGEMM off on SM120 in every release the GLM-5
    profiles allow there (docs/sources.md, SGLang releases, read from their wheels), and
    leaves SM100 to SGLang."""
    args = ["render", "--profile", profile, "--gpus", "8", "--arch", arch]
    assert main([*args, "--sglang-version", version]) == 0
    env = capsys.readouterr().out.split("# ==> /etc/sglang/sglang.env (mode 600) <==", 1)[1]
    env = env.split("# ==> ", 1)[0]
    assert ("\nSGLANG_ENABLE_JIT_DEEPGEMM=0\n" in env) is (arch == "sm_120")


def test_render_command_output_is_stable(capsys):
    args = [
        "render",
        "--profile",
        "dense-bf16",
        "--gpus",
        "2",
        "--arch",
        "sm_90",
        "--sglang-version",
        "0.5.9",
    ]
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert capsys.readouterr().out == first
    assert "PCIe only: no" in first and "NCCL_" not in first  # H200s have NVLink
    assert "--nsa-prefill-backend" not in first and "--tp-size 2" in first
    assert "--revision" not in first  # dense-bf16 pins none: main, via the cache's refs/main


def test_render_command_refuses_what_does_not_fit(capsys):
    code = main(
        [
            "render",
            "--profile",
            "glm-5-nvfp4",
            "--gpus",
            "4",
            "--arch",
            "sm_120",
            "--sglang-version",
            "0.5.23",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert "refused: profile glm-5-nvfp4 does not fit 4 x 96 GB" in captured.err
    assert "each GPU needs 121.4 GiB" in captured.err


def test_render_command_version_error(capsys):
    code = main(
        [
            "render",
            "--profile",
            "glm-5-nvfp4",
            "--gpus",
            "8",
            "--arch",
            "sm_120",
            "--sglang-version",
            "0.5.8",
        ]
    )
    assert code == 1
    assert "needs SGLang 0.5.9 or later" in capsys.readouterr().err


PUBLIC_TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "public"
RENDER_SM120 = ["render", "--profile", "glm-5-nvfp4", "--gpus", "8", "--arch", "sm_120"]


@pytest.mark.parametrize(
    ("topo", "level"),
    [
        ("topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt", "SYS"),  # two sockets
        ("topo_8x_rtxpro6000_wrx90_3switch_pix_pxb_node_trimmed.txt", "PHB"),  # one socket
    ],
)
def test_render_command_reads_the_nccl_level_from_a_posted_topology(capsys, topo, level):
    args = [*RENDER_SM120, "--sglang-version", "0.5.23", "--topo", str(PUBLIC_TOPO / topo)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"NCCL_P2P_LEVEL={level}\n" in out and "PCIe only: yes" in out


def test_render_command_refuses_a_topology_file_without_a_matrix(capsys, tmp_path):
    empty = tmp_path / "topo.txt"
    empty.write_text("nvidia-smi: command not found\n")
    assert main([*RENDER_SM120, "--sglang-version", "0.5.23", "--topo", str(empty)]) == 1
    assert f"--topo {empty}: no GPU rows" in capsys.readouterr().err


def test_render_command_refuses_glm5_sparse_on_sm120_before_0_5_17(capsys):
    assert main([*RENDER_SM120, "--sglang-version", "0.5.16"]) == 1
    err = capsys.readouterr().err
    assert "on sm_120 GPUs needs SGLang 0.5.17 or later" in err
    assert "or use profile glm-5-nvfp4-dense" in err


def test_render_command_memory_host_port_and_user_profiles(tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text('model = "org/tiny"\nmin_total_gpu_memory_gb = 40\n')
    code = main(
        [
            "render",
            "--profile",
            "tiny",
            "--profile-dir",
            str(tmp_path),
            "--gpus",
            "2",
            "--arch",
            "sm_89",
            "--gpu-mem-gb",
            "24",
            "--sglang-version",
            "0.5.23",
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--pcie-only",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "2 x 24 GB sm_89 (given)" in out
    assert "--model-path org/tiny" in out and "--host 0.0.0.0" in out and "--port 8080" in out
    assert "NCCL_IB_DISABLE=1" in out
    assert (
        main(
            [
                "render",
                "--profile",
                "tiny",
                "--profile-dir",
                str(tmp_path),
                "--gpus",
                "1",
                "--arch",
                "sm_89",
                "--gpu-mem-gb",
                "24",
                "--sglang-version",
                "0.5.23",
            ]
        )
        == 1
    )
    assert "needs at least 40 GB" in capsys.readouterr().err


def test_render_command_rejects_bad_arguments(capsys):
    for bad in (["--arch", "hopper"], ["--sglang-version", "0.5"], ["--gpus", "0"]):
        args = {
            "--profile": "dense-bf16",
            "--gpus": "1",
            "--arch": "sm_90",
            "--sglang-version": "0.5.23",
        }
        args.update(dict([bad]))
        with pytest.raises(SystemExit) as exit_:
            main(["render", *[word for pair in args.items() for word in pair]])
        assert exit_.value.code == 2
    capsys.readouterr()


def test_every_intent_rendered_has_a_row_in_the_flag_table():
    from pyinfra_sglang.serving.render import _intent_values

    values = _intent_values(load_profile("glm-5-nvfp4"), 8, "127.0.0.1", 30000, CONFIG, 1, 0, None)
    assert set(values) == set(flag_table())


# --- pyinfra-sglang render --inventory: what an inventory host would get -------------------

PREVIEW_INVENTORY = """
pair = [
    ("node-a", {"ssh_hostname": "10.0.0.11", "sglang_multinode_group": "pair",
                "expected_gpu_count": 4}),
    ("node-b", {"ssh_hostname": "10.0.0.12", "sglang_multinode_group": "pair",
                "expected_gpu_count": 4}),
]
routers = [
    ("router-1", {"sglang_model_profile": "dense-bf16",
                  "sglang_router_worker_urls": ["http://10.0.0.21:30000",
                                                "http://10.0.0.22:30000"]}),
]
"""


@pytest.fixture
def preview_inventory(tmp_path):
    path = tmp_path / "inventory.py"
    path.write_text(PREVIEW_INVENTORY)
    return path


def _preview(capsys, inventory_file, host: str, *more: str) -> dict:
    argv = ["render", "--inventory", str(inventory_file), "--inventory-host", host, *more]
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _deploy_files(inventory_file, host_name: str):
    """What the deploy's own functions render for the host (GPUs planned, secrets masked)."""
    from pyinfra_sglang.inventory import (
        load_inventory_file,
        node_position_in,
        validate_inventory,
    )
    from pyinfra_sglang.serving.service_files import planned_service_files

    loaded = load_inventory_file(str(inventory_file))
    config = validate_inventory(loaded)[host_name]
    return planned_service_files(config, node_position_in(config, loaded.get_host(host_name)))


@pytest.mark.parametrize("host_name", ["node-a", "node-b", "router-1"])
def test_inventory_preview_is_what_the_core_renders_for_the_host(
    capsys, preview_inventory, host_name
):
    preview = _preview(capsys, preview_inventory, host_name)
    expected = _deploy_files(preview_inventory, host_name)
    assert [(f["path"], f["mode"], f["content"]) for f in preview["files"]] == [
        (f.path, f.mode, f.content) for f in expected.files
    ]
    assert preview["removes"] == list(expected.stale)
    # The text form prints the same bytes.
    argv = ["render", "--inventory", str(preview_inventory), "--inventory-host", host_name]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for file in expected.files:
        assert f"# ==> {file.path} (mode {file.mode}) <==\n{file.content}" in out


def test_flag_preview_is_what_the_deploy_renders_for_a_default_host(capsys, tmp_path):
    # render --profile ... builds the service through service_files_for, as the deploy
    # does: the same files as an inventory host of the defaults with those values (the
    # CUDA_HOME and CUDA PATH lines the deploy writes included; they were missing).
    for name in ("api-key", "hf-token"):
        (tmp_path / name).write_text("s3cret\n")
    inventory_file = tmp_path / "inventory.py"
    inventory_file.write_text(
        'hosts = [("gpu-1", {"sglang_model_profile": "dense-bf16", "sglang_port": 30011, '
        f'"sglang_api_key_file": "{tmp_path / "api-key"}", '
        f'"hf_token_file": "{tmp_path / "hf-token"}"}})]\n'
    )
    gpus = ["--gpus", "2", "--arch", "sm_90"]
    inventory = _preview(capsys, inventory_file, "gpu-1", *gpus)
    argv = ["render", "--profile", "dense-bf16", "--sglang-version", "0.5.23", *gpus]
    assert main([*argv, "--port", "30011", "--json"]) == 0
    flagged = json.loads(capsys.readouterr().out)
    assert flagged["files"] == inventory["files"]
    env = flagged["files"][1]["content"]
    assert "CUDA_HOME=/usr/local/cuda-13.1\n" in env and "/usr/local/cuda-13.1/bin:" in env


def test_multinode_preview_carries_the_members_place(capsys, preview_inventory):
    for rank, host_name in enumerate(["node-a", "node-b"]):
        preview = _preview(capsys, preview_inventory, host_name)
        unit = preview["files"][0]["content"]
        assert "    --nnodes 2 \\\n" in unit and f"    --node-rank {rank} \\\n" in unit
        assert "    --dist-init-addr 10.0.0.11:50000 \\\n" in unit
        assert preview["node"] == {"nnodes": 2, "rank": rank, "dist_init_addr": "10.0.0.11:50000"}
        assert "    --tp-size 8 \\\n" in unit  # 4 GPUs a node, 2 nodes


def test_router_preview_holds_the_router_unit_and_its_workers(capsys, preview_inventory):
    preview = _preview(capsys, preview_inventory, "router-1")
    files = {f["path"]: f["content"] for f in preview["files"]}
    router = files["/etc/systemd/system/sglang-router.service"]
    assert "--worker-urls http://10.0.0.21:30000 http://10.0.0.22:30000" in router
    # No router API key: no env file for it (one left from before is removed).
    assert preview["removes"] == ["/etc/sglang/sglang-router.env"]
    # A host behind no router: the deploy removes a router's files left from before.
    assert (
        "/etc/systemd/system/sglang-router.service"
        in _preview(capsys, preview_inventory, "node-a")["removes"]
    )


def test_inventory_preview_with_the_gpus_given(capsys, preview_inventory):
    preview = _preview(capsys, preview_inventory, "router-1", "--gpus", "2", "--arch", "sm_90")
    assert preview["gpus"]["count"] == 2 and "--tp-size 2" in preview["files"][0]["content"]


def test_inventory_preview_refusals(capsys, preview_inventory):
    base = ["render", "--inventory", str(preview_inventory)]
    assert main([*base, "--inventory-host", "nobody"]) == 2
    assert "no host 'nobody'; its hosts: node-a, node-b, router-1" in capsys.readouterr().err
    assert main(base) == 2
    assert "--inventory and --inventory-host go together" in capsys.readouterr().err
    assert main([*base, "--inventory-host", "node-a", "--port", "8080"]) == 2
    assert "--port: from the inventory" in capsys.readouterr().err
    assert main([*base, "--inventory-host", "node-a", "--data", "sglang_port=0"]) == 1
    assert "host node-a: sglang_port = 0" in capsys.readouterr().err
    assert main(["render", "--gpus", "2"]) == 2
    assert "give --profile, --arch, --sglang-version" in capsys.readouterr().err


def test_render_flags_for_a_multinode_member(capsys):
    argv = [*RENDER_SM120[:3], "--gpus", "4", "--arch", "sm_120", "--sglang-version", "0.5.23"]
    multinode = ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.11:50000"]
    assert main([*argv, *multinode]) == 0
    out = capsys.readouterr().out
    assert "node 1 of 2; secrets masked" in out.splitlines()[0]
    assert "--nnodes 2 \\\n    --node-rank 1 \\\n    --dist-init-addr 10.0.0.11:50000" in out
    assert main([*argv, "--nnodes", "2"]) == 1
    assert "2 nodes need dist_init_addr" in capsys.readouterr().err


def test_the_env_files_p2p_note_is_checked_like_every_value():
    """Issue 35 N5: the note (a comment line, from what the host reported) skipped the
    control-character check: a newline in it would start a variable of its own."""
    from pyinfra_sglang.gpu_links.p2p import P2PHint

    spec = EnvSpec(VENV, pcie_only=True, widest_path="PHB")
    fine = render_env(dataclasses.replace(spec, p2p=P2PHint("disable", "ACS redirects")))
    assert "# NCCL_P2P_DISABLE=1: ACS redirects\n" in fine
    hostile = P2PHint("disable", "ACS\nLD_PRELOAD=/tmp/evil.so")
    with pytest.raises(RenderError, match="note on P2P has control characters"):
        render_env(dataclasses.replace(spec, p2p=hostile))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", "--host=0.0.0.0"),
        ("kv_cache_dtype", "-h"),
        ("quantization", "--api-key=x"),
        ("reasoning_parser", "-v"),
    ],
)
def test_a_value_that_reads_as_a_flag_is_refused(field, value):
    """Issue 35 N7: rendered as a flag's value, argparse took these for flags of their own."""
    profile = load_profile("dense-bf16").model_copy(update={field: value})
    with pytest.raises(RenderError, match=re.escape(f" = '{value}' starts with '-'")):
        placed_args(profile, "0.5.23", 1, "127.0.0.1", 30000, CONFIG)
    # A negative number is a value to argparse: chunked_prefill_size = -1 turns chunking off.
    off = load_profile("dense-bf16").model_copy(update={"chunked_prefill_size": -1})
    assert "-1" in placed_args(off, "0.5.23", 1, "127.0.0.1", 30000, CONFIG)


def test_inventory_preview_counts_topo_memory_and_pcie_options(capsys, preview_inventory):
    """Issue 47: with --inventory and no --gpus, --topo, --gpu-mem-gb and --pcie-only were
    ignored: the preview printed the planned NVLink box's env whatever the file said."""
    plain = _preview(capsys, preview_inventory, "node-a")
    env = {f["path"]: f["content"] for f in plain["files"]}["/etc/sglang/sglang.env"]
    assert "NCCL_P2P_LEVEL" not in env  # planned: B200s, NVLinked
    topo = str(PUBLIC_TOPO / "topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt")
    given = _preview(capsys, preview_inventory, "node-a", "--topo", topo)
    env = {f["path"]: f["content"] for f in given["files"]}["/etc/sglang/sglang.env"]
    assert "NCCL_P2P_LEVEL=SYS" in env and given["gpus"]["pcie_only"] is True
    argv = ["render", "--inventory", str(preview_inventory), "--inventory-host", "node-a"]
    assert main([*argv, "--topo", topo]) == 0
    assert "--topo given" in capsys.readouterr().out.splitlines()[0]
    memory = _preview(capsys, preview_inventory, "node-a", "--gpu-mem-gb", "96", "--pcie-only")
    assert memory["gpus"]["memory_gb"] == 96 and memory["gpus"]["pcie_only"] is True
