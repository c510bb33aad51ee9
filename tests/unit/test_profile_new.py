"""`pyinfra-sglang profile new MODEL`: a profile written from the model's own files (the
models' real config.json, tests/fixtures/model-configs, served by the Hub stand-in or read
from a folder) that validates as written, and the walk a user takes from a Hub id to a
rendered unit: profile new, validate, render."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.model_shape.files import with_modelopt
from pyinfra_sglang.serving.profiles import load_profile_file
from tests.hosts.hubstandin import Hub, Repo, serve
from tests.unit.example_site import example_site

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "fixtures" / "model-configs"
QWEN = "Qwen/Qwen3-32B"
COMMIT = hashlib.sha1(b"stand-in of Qwen3-32B").hexdigest()
RENTED = "inventories/h100-sxm-rented.py"
HOST = "h100-sxm-01.example.internal"


@pytest.fixture
def site(tmp_path, monkeypatch):
    return example_site(tmp_path, monkeypatch)


@pytest.fixture
def hub():
    files = {"config.json": (CONFIGS / "Qwen--Qwen3-32B" / "config.json").read_bytes()}
    stand_in = Hub({QWEN: Repo(commits={COMMIT: files}, refs={"main": COMMIT})})
    with serve(stand_in) as endpoint:
        yield endpoint


def test_from_a_hub_id_to_a_rendered_unit(site, hub, capsys):
    assert main(["profile", "new", QWEN, "--hf-endpoint", hub]) == 0
    path = site / "profiles" / "qwen3-32b.toml"
    profile = load_profile_file(path)
    assert (profile.model, profile.revision) == (QWEN, COMMIT)  # pinned at the commit read
    assert (profile.reasoning_parser, profile.tool_call_parser) == ("qwen3", "qwen")
    assert (profile.num_layers, profile.num_attention_heads, profile.num_key_value_heads) == (
        64,
        64,
        8,
    )
    assert profile.kv_bytes_per_token["auto"] == 64 * 8 * 256 * 2
    assert profile.context_length == 40960 and profile.weights_gb == 65.5
    text = path.read_text()
    assert "# Size: 32.76B parameters; weights from 32,762,123,264 parameters" in text
    assert max(len(line) for line in text.splitlines() if line.startswith("#")) <= 95
    capsys.readouterr()
    data = [
        "--data",
        'sglang_profile_dirs=["profiles"]',
        "--data",
        "sglang_model_profile=qwen3-32b",
    ]
    assert main(["validate", RENTED, *data]) == 0
    out = capsys.readouterr().out
    assert f"fit: {QWEN} fits 8 x 80 GB at tensor-parallel size 8" in out
    assert main(["render", "--inventory", RENTED, "--inventory-host", HOST, *data]) == 0
    unit = capsys.readouterr().out
    for flag in (f"--model-path {QWEN}", f"--revision {COMMIT}", "--reasoning-parser qwen3"):
        assert flag in unit


def test_the_same_files_write_the_same_text(site, hub):
    assert main(["profile", "new", QWEN, "--hf-endpoint", hub, "--output", "a.toml"]) == 0
    assert main(["profile", "new", QWEN, "--hf-endpoint", hub, "--output", "b.toml"]) == 0
    assert (site / "a.toml").read_bytes() == (site / "b.toml").read_bytes()


@pytest.mark.parametrize(
    ("name", "expect"),
    [
        ("openai--gpt-oss-120b", {"reasoning_parser": "gpt-oss", "num_routed_experts": 128}),
        ("deepseek-ai--DeepSeek-V3", {"tool_call_parser": "deepseekv3", "mtp_layers": 1}),
        ("meta-llama--Llama-3.1-70B", {"tool_call_parser": "llama3", "num_layers": 80}),
        ("zai-org--GLM-5", {"reasoning_parser": "glm45", "tool_call_parser": "glm47"}),
    ],
)
def test_a_folder_gets_a_profile_of_its_family(site, name, expect):
    assert main(["profile", "new", str(CONFIGS / name)]) == 0
    profile = load_profile_file(site / "profiles" / f"{name.lower()}.toml")
    assert profile.model == str(CONFIGS / name) and profile.revision is None
    for field, value in expect.items():
        assert getattr(profile, field) == value


def test_an_existing_file_is_kept_unless_forced(site, hub, capsys):
    (site / "profiles").mkdir()
    (site / "profiles" / "qwen3-32b.toml").write_text("kept\n")
    assert main(["profile", "new", QWEN, "--hf-endpoint", hub]) == 2
    assert "--force replaces it" in capsys.readouterr().err
    assert (site / "profiles" / "qwen3-32b.toml").read_text() == "kept\n"
    assert main(["profile", "new", QWEN, "--hf-endpoint", hub, "--force"]) == 0


def test_an_unreadable_model_writes_nothing(site, capsys):
    code = main(["profile", "new", "org/none", "--hf-endpoint", "http://127.0.0.1:9"])
    assert code == 2 and "cannot reach the Hub" in capsys.readouterr().err
    assert not (site / "profiles").exists()


def test_a_modelopt_checkpoint_takes_its_quantization_file():
    # The shape of a ModelOpt export's hf_quant_config.json (its "quantization" table).
    config = json.loads((CONFIGS / "zai-org--GLM-5" / "config.json").read_text())
    quant = {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []}}
    merged = with_modelopt(config, json.dumps(quant).encode(), "hf_quant_config.json")
    assert merged["quantization_config"]["quant_method"] == "modelopt"
    from pyinfra_sglang.model_shape.shape import shape_of

    shape = shape_of(merged)
    assert shape.quantization == "modelopt_nvfp4"
    # NVFP4 weights (0.5625 byte each) a third of bf16's, near the checkpoint's 460.8 GB.
    assert 400e9 < shape.weight_bytes < 480e9


def test_an_nvfp4_checkpoint_gets_its_flag_and_blackwell(site):
    # GLM-5's config with the shape of a ModelOpt export's hf_quant_config.json beside it.
    folder = site / "glm-5-nvfp4"
    folder.mkdir()
    shutil.copy(CONFIGS / "zai-org--GLM-5" / "config.json", folder)
    quant = {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []}}
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    assert main(["profile", "new", str(folder)]) == 0
    profile = load_profile_file(site / "profiles" / "glm-5-nvfp4.toml")
    assert profile.quantization == "modelopt_fp4" and profile.archs == ["sm_100", "sm_120"]
    assert (profile.reasoning_parser, profile.tool_call_parser) == ("glm45", "glm47")
