"""An override of a profile's ``model`` is sized from that model's own files: its
config.json and its weights' sizes, read on the controller from the Hub (a stand-in serving
the models' real config.json, tests/fixtures/model-configs), a folder or the controller's
Hub cache. Where they cannot be read, another Hub model is refused naming the fields to
give and the ways to let them be read; never planned on the placeholder's numbers. A model
that fits gets its fit line; one that does not is refused with the numbers."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from tests.hosts.hubstandin import Hub, Repo, serve
from tests.unit.example_site import example_site

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "fixtures" / "model-configs"
RENTED = "inventories/h100-sxm-rented.py"  # 8x H100 80GB, dense-bf16 (Qwen3-8B placeholder)
LLAMA_405B = "meta-llama/Llama-3.1-405B"
QWEN3_32B = "Qwen/Qwen3-32B"
# Qwen3-32B's 17 shards as the Hub lists them: its 32,762,123,264 bf16 parameters (the Hub's
# own count, SOURCES.md), split as a test needs (never downloaded here).
QWEN3_32B_SHARDS = {f"model-{i:05d}-of-00017.safetensors": 65524246528 // 17 for i in range(17)}


def commit_of(repo: str) -> str:
    return hashlib.sha1(f"stand-in of {repo}".encode()).hexdigest()


def repo_of(name: str, shards: dict[str, int] | None = None) -> Repo:
    files = {"config.json": (CONFIGS / name / "config.json").read_bytes()}
    files.update({shard: b"" for shard in shards or {}})
    commit = commit_of(name)
    return Repo(commits={commit: files}, refs={"main": commit}, listed_sizes=shards or {})


@pytest.fixture
def hub():
    stand_in = Hub(
        {
            LLAMA_405B: repo_of("meta-llama--Llama-3.1-405B"),
            QWEN3_32B: repo_of("Qwen--Qwen3-32B", QWEN3_32B_SHARDS),
            "openai/gpt-oss-120b": repo_of("openai--gpt-oss-120b"),
        }
    )
    with serve(stand_in) as endpoint:
        stand_in.endpoint = endpoint
        yield stand_in


@pytest.fixture
def site(tmp_path, monkeypatch):
    return example_site(tmp_path, monkeypatch)


def validate(capsys, overrides: dict, *data: str, json_out: bool = True) -> tuple[int, object]:
    argv = ["validate", RENTED, "--data", f"sglang_profile_overrides={json.dumps(overrides)}"]
    for item in data:
        argv += ["--data", item]
    code = main([*argv, "--json"] if json_out else argv)
    out = capsys.readouterr().out
    return code, json.loads(out) if json_out else out


def test_llama_405b_is_refused_with_the_numbers_read_from_its_config(site, hub, capsys):
    code, result = validate(capsys, {"model": LLAMA_405B}, f"hf_endpoint={hub.endpoint}")
    [problem] = result["problems"]
    assert code == 1 and problem["field"] == "sglang_profile_overrides"
    message = problem["message"]
    # 405.85B bf16 parameters: 811.7 GB over 8 GPUs of 80 GB.
    assert "does not fit 8 x 80 GB" in message and "811.7 GB / 8" in message
    assert "126 layers" not in message  # the numbers are the fit's, not a missing-field list
    requests = [path for _, path, _ in hub.requests]
    assert f"/api/models/{LLAMA_405B}/revision/main" in requests
    assert (
        f"/{LLAMA_405B}/resolve/{commit_of('meta-llama--Llama-3.1-405B')}/config.json" in requests
    )
    assert not [path for path in requests if path.endswith(".safetensors")]


def test_qwen3_32b_fits_with_a_fit_line(site, hub, capsys):
    code, result = validate(capsys, {"model": QWEN3_32B}, f"hf_endpoint={hub.endpoint}")
    assert code == 0, result
    [fit] = result["fit"].values()
    assert fit["model"] == QWEN3_32B and fit["fits"] and fit["tp_size"] == 8
    # The Hub's shard sizes (65.5 GB) over 8 GPUs; 40,960 tokens of context from config.json.
    assert fit["weights_gib"] == pytest.approx(65.5 * 1e9 / 2**30 / 8, abs=0.01)
    assert fit["context_length"] == 40960
    # KV: 64 layers x 8 heads x 256 x 2 bytes, one head a GPU at tensor-parallel size 8.
    room = fit["budget_gib"] - fit["weights_gib"] - fit["overhead_gib"]
    assert fit["kv_tokens"] == pytest.approx(room * 2**30 / (64 * 8 * 256 * 2 / 8), rel=1e-3)
    assert fit["full_context_requests"] == pytest.approx(fit["kv_tokens"] / 40960, abs=0.01)
    code, text = validate(
        capsys, {"model": QWEN3_32B}, f"hf_endpoint={hub.endpoint}", json_out=False
    )
    assert code == 0
    assert f"fit: {QWEN3_32B} fits 8 x 80 GB at tensor-parallel size 8" in text
    assert "requests of the full 40,960-token context" in text


def test_the_override_wins_over_what_is_read(site, hub, capsys):
    override = {"model": QWEN3_32B, "kv_cache_dtype": "fp8_e4m3", "weights_gb": 70}
    code, result = validate(capsys, override, f"hf_endpoint={hub.endpoint}")
    [fit] = result["fit"].values()
    assert code == 0 and fit["weights_gib"] == pytest.approx(70e9 / 2**30 / 8, abs=0.01)


def test_a_pinned_commit_is_read_once_and_kept(site, hub, capsys):
    pinned = commit_of("Qwen--Qwen3-32B")
    args = (f"hf_endpoint={hub.endpoint}", f"sglang_model_revision={pinned}")
    assert validate(capsys, {"model": QWEN3_32B}, *args)[0] == 0
    asked = len(hub.requests)
    kept = site / "cache" / "pyinfra-sglang" / "model-files" / "models--Qwen--Qwen3-32B" / pinned
    assert json.loads((kept / "config.json").read_text())["num_hidden_layers"] == 64
    # A second process (the module cache is per process): read from the kept files only.
    from pyinfra_sglang.model_files import model_snapshot
    from pyinfra_sglang.model_shape import files
    from pyinfra_sglang.serving import model_sizing

    model_snapshot.hub_snapshot.cache_clear()
    files.model_files.cache_clear()
    model_sizing._read.cache_clear()
    assert validate(capsys, {"model": QWEN3_32B}, *args)[0] == 0
    assert len(hub.requests) == asked


def test_an_unreachable_hub_is_refused_naming_the_fields_and_the_ways(site, capsys):
    code, result = validate(capsys, {"model": LLAMA_405B}, "hf_endpoint=http://127.0.0.1:9")
    [problem] = result["problems"]
    message = problem["message"]
    assert code == 1 and problem["field"] == "sglang_profile_overrides"
    assert "cannot reach the Hub at http://127.0.0.1:9" in message
    assert "weights_gb (or min_total_gpu_memory_gb), num_layers, kv_bytes_per_token" in message
    assert "hf_endpoint" in message and f"hf download {LLAMA_405B} config.json" in message


def test_the_controllers_hub_cache_is_read_without_the_hub(site, capsys):
    commit = commit_of("Qwen--Qwen3-32B")
    cached = site / "hf-hub" / "models--Qwen--Qwen3-32B"
    (cached / "snapshots" / commit).mkdir(parents=True)
    shutil.copy(CONFIGS / "Qwen--Qwen3-32B" / "config.json", cached / "snapshots" / commit)
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text(commit)
    code, result = validate(capsys, {"model": QWEN3_32B}, "hf_endpoint=http://127.0.0.1:9")
    assert code == 0, result
    [fit] = result["fit"].values()
    # No shards in that cache: the weights are the config's own count, 2 bytes each.
    assert fit["weights_gib"] == pytest.approx(32762123264 * 2 / 2**30 / 8, abs=0.01)


def test_a_gpt_oss_override_is_sized_from_its_mxfp4_config(site, hub, capsys):
    code, result = validate(capsys, {"model": "openai/gpt-oss-120b"}, f"hf_endpoint={hub.endpoint}")
    assert code == 0, result
    [fit] = result["fit"].values()
    assert fit["weights_gib"] == pytest.approx(65.25e9 / 2**30 / 8, abs=0.01)


def test_a_local_folder_the_controller_cannot_read_is_warned_about(site, capsys, caplog):
    code, _ = validate(capsys, {"model": "/models/qwen3-8b"})
    assert code == 0
    [warning] = [r.getMessage() for r in caplog.records if "/models/qwen3-8b" in r.getMessage()]
    assert "its size could not be read" in warning and "profile's model" in warning


def test_a_local_folder_the_controller_reads_is_sized(site, capsys):
    folder = site / "models" / "qwen3-32b"
    folder.mkdir(parents=True)
    shutil.copy(CONFIGS / "Qwen--Qwen3-32B" / "config.json", folder)
    code, result = validate(capsys, {"model": str(folder)})
    assert code == 0, result
    [fit] = result["fit"].values()
    assert fit["context_length"] == 40960


def test_the_profiles_own_model_needs_nothing_more(site, capsys):
    code, result = validate(capsys, {"model": "Qwen/Qwen3-8B"}, "hf_endpoint=http://127.0.0.1:9")
    assert code == 0 and result["fit"]


def test_no_expected_gpu_model_is_not_judged_on_an_assumed_gpu(site, capsys):
    (site / "one.py").write_text(
        "gpu_hosts = [('gpu-1', {'sglang_model_profile': 'dense-bf16'})]\n"
    )
    assert main(["validate", "one.py", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fit"] == {"gpu-1": None}
    assert result["fit_not_judged"]["gpu-1"].startswith("not judged: the inventory names no")


def test_nothing_of_the_profiles_model_stays_with_another_model(site, hub, monkeypatch):
    """GLM-5's profile served with Qwen3-32B: no --quantization modelopt_fp4 for a bf16
    model, Qwen3's parsers, no GLM-5 served name, any GPU architecture."""
    from pyinfra_sglang.inventory import HostConfig, host_profile

    config = HostConfig(
        sglang_model_profile="glm-5-nvfp4",
        sglang_profile_overrides={"model": QWEN3_32B},
        hf_endpoint=hub.endpoint,
    )
    profile = host_profile(config)
    assert (profile.quantization, profile.archs, profile.served_model_name) == (None, None, None)
    assert (profile.reasoning_parser, profile.tool_call_parser) == ("qwen3", "qwen")
    assert not profile.disable_shared_experts_fusion and not profile.trust_remote_code
    assert profile.kv_bytes_per_token_by_backend == {} and profile.num_routed_experts is None
    # What the override says itself still wins.
    config = HostConfig(
        sglang_model_profile="glm-5-nvfp4",
        sglang_profile_overrides={"model": QWEN3_32B, "served_model_name": "qwen"},
        hf_endpoint=hub.endpoint,
    )
    assert host_profile(config).served_model_name == "qwen"
