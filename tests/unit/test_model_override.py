"""An override of a profile's ``model`` that keeps the profile's size is never planned on the
placeholder's numbers: another Hub model is refused naming the fields to give, a local
folder (perhaps the profile's own model, copied) is warned about. With the size given, the
fit is judged on it, and a refusal names the override that caused it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
RENTED = "inventories/h100-sxm-rented.py"  # 8x H100 80GB, dense-bf16 (Qwen3-8B placeholder)
LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"
# What a user gives for Qwen3-32B (its model card: 32.8B parameters in bf16, 64 layers, 64
# query and 8 KV heads of 128): 2 bytes x 32.8B; K and V of 8 heads x 128 x 2 bytes a layer.
QWEN3_32B = {
    "model": "Qwen/Qwen3-32B",
    "weights_gb": 65.6,
    "num_layers": 64,
    "kv_bytes_per_token": {"auto": 64 * 8 * 128 * 2 * 2},
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}


@pytest.fixture
def site(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "inventories", tmp_path / "inventories")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "sglang-api-key").write_text("sk-test-0123\n")
    (tmp_path / "secrets" / "sglang-api-key").chmod(0o600)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def validate(capsys, overrides: dict) -> tuple[int, dict]:
    argv = ["validate", RENTED, "--data", f"sglang_profile_overrides={json.dumps(overrides)}"]
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_another_hub_model_without_its_size_is_refused_naming_the_fields(site, capsys):
    code, result = validate(capsys, {"model": LLAMA_405B})
    [problem] = result["problems"]
    assert code == 1 and problem["field"] == "sglang_profile_overrides"
    message = problem["message"]
    assert "weights_gb (or min_total_gpu_memory_gb), num_layers, kv_bytes_per_token" in message
    assert "Qwen/Qwen3-8B: 16.4 GB, 36 layers" in message
    assert "num_attention_heads, num_key_value_heads" in message


def test_with_its_size_the_fit_is_judged_and_the_override_is_blamed(site, capsys):
    size = {"weights_gb": 811, "num_layers": 126, "kv_bytes_per_token": {"auto": 516096}}
    code, result = validate(capsys, {"model": LLAMA_405B, **size})
    [problem] = result["problems"]
    assert code == 1 and problem["field"] == "sglang_profile_overrides"
    assert "does not fit 8 x 80 GB" in problem["message"]
    assert "811 GB / 8" in problem["message"]


def test_a_model_that_fits_validates(site, capsys):
    code, result = validate(capsys, QWEN3_32B)
    assert code == 0 and result["hosts"] == ["h100-sxm-01.example.internal"]


def test_a_local_folder_is_warned_about_not_refused(site, capsys, caplog):
    code, _ = validate(capsys, {"model": "/models/qwen3-8b"})
    assert code == 0
    [warning] = [r.getMessage() for r in caplog.records if "sets model" in r.getMessage()]
    assert "'/models/qwen3-8b'" in warning and "if that folder holds another model" in warning


def test_the_profiles_own_model_needs_nothing_more(site, capsys):
    code, _ = validate(capsys, {"model": "Qwen/Qwen3-8B"})
    assert code == 0
