"""`pyinfra-sglang plan`: a model's fit on GPUs from its own config.json (the models' real
files, tests/fixtures/model-configs), layout by layout; exit 0 when one fits, 1 when none
does, 2 for bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from tests.hosts.hubstandin import Hub, Repo, serve
from tests.unit.example_site import example_site

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


@pytest.fixture(autouse=True)
def own_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))


def plan(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["plan", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def by_layout(result: dict) -> dict:
    return {layout["layout"]: layout for layout in result["layouts"]}


@pytest.mark.parametrize(
    ("model", "gpu", "fits", "fewest"),
    [
        ("Qwen--Qwen3-32B", H100, True, 1),
        ("meta-llama--Llama-3.1-405B", H100, False, None),
        ("meta-llama--Llama-3.1-405B", H200, True, 8),
        ("deepseek-ai--DeepSeek-V3", H100, False, None),
        ("deepseek-ai--DeepSeek-V3", H200, True, 8),
        ("openai--gpt-oss-120b", H100, True, 1),
    ],
)
def test_the_fit_on_eight_gpus(capsys, model, gpu, fits, fewest):
    code, result = plan(capsys, "--model", str(CONFIGS / model), "--gpus", "8", "--gpu-model", gpu)
    assert (code, result["fits"], result["fewest_gpus"]) == (0 if fits else 1, fits, fewest)
    layouts = by_layout(result)
    assert set(layouts) >= {"TP 1", "TP 2", "TP 4", "TP 8"}
    eight = layouts["TP 8"]["fit"]
    assert eight["fits"] == fits
    if fits:
        # The KV cache gets what the budget keeps after weights and overhead.
        room = eight["budget_gib"] - eight["weights_gib"] - eight["overhead_gib"]
        assert eight["kv_tokens"] > 0 and room > 0
        assert layouts["TP 8"]["decode_roofline_tokens_per_s"] > 0


def test_an_moe_model_gets_expert_and_dp_attention_layouts(capsys):
    code, result = plan(
        capsys,
        "--model",
        str(CONFIGS / "deepseek-ai--DeepSeek-V3"),
        "--gpus",
        "8",
        "--gpu-model",
        H200,
    )
    layouts = by_layout(result)
    assert code == 0 and {"TP 8 EP 8", "TP 8 DP-attention 8"} <= set(layouts)
    # DP attention keeps attention and embeddings whole per group: more weights a GPU.
    assert (
        layouts["TP 8 DP-attention 8"]["fit"]["weights_gib"] > layouts["TP 8"]["fit"]["weights_gib"]
    )
    model = result["model"]
    assert model["quantization"] == "fp8" and model["num_routed_experts"] == 256
    assert model["mtp_layers"] == 1 and model["context_length"] == 163840


def test_the_text_names_each_layout_and_the_roofline(capsys):
    code = main(
        ["plan", "--model", str(CONFIGS / "Qwen--Qwen3-32B"), "--gpus", "8", "--gpu-model", H100]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert "32.76B parameters (bfloat16), 65.5 GB of weights (from its config.json)" in text
    assert "TP 8" in text and "decode/s" in text and "the fewest GPUs that hold it: 1" in text


def test_a_hub_id_is_read_through_the_endpoint(capsys):
    commit = hashlib.sha1(b"qwen3-32b").hexdigest()
    files = {"config.json": (CONFIGS / "Qwen--Qwen3-32B" / "config.json").read_bytes()}
    hub = Hub({"Qwen/Qwen3-32B": Repo(commits={commit: files}, refs={"main": commit})})
    with serve(hub) as endpoint:
        code, result = plan(
            capsys,
            "--model",
            "Qwen/Qwen3-32B",
            "--hf-endpoint",
            endpoint,
            "--gpus",
            "2",
            "--gpu-model",
            H100,
        )
    assert code == 0 and result["model"]["read_from"].startswith(f"Qwen/Qwen3-32B at {commit}")
    assert [path for _, path, _ in hub.requests][-1].endswith(f"/resolve/{commit}/config.json")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--model", "x/y", "--gpus", "8"], "give --gpu-model"),
        (["--model", "/nonexistent", "--gpus", "8", "--gpu-model", H100], "no such file"),
        (
            ["--model", str(CONFIGS / "Qwen--Qwen3-32B"), "--gpus", "8", "--gpu-model", "H9000"],
            "no spec for GPU",
        ),
        (["--inventory", "inventories/h100-sxm-rented.py"], "go together"),
        (
            [
                "--model",
                "x/y",
                "--gpus",
                "8",
                "--gpu-model",
                H100,
                "--hf-endpoint",
                "http://127.0.0.1:9",
            ],
            "cannot reach the Hub",
        ),
    ],
)
def test_bad_input_exits_2_saying_why(capsys, argv, said):
    code = main(["plan", *argv])
    assert code == 2 and said in capsys.readouterr().err


def test_an_inventory_host_brings_its_gpus_and_release(capsys, tmp_path, monkeypatch):
    example_site(tmp_path, monkeypatch)
    code, result = plan(
        capsys,
        "--inventory",
        "inventories/h100-sxm-rented.py",
        "--inventory-host",
        "h100-sxm-01.example.internal",
        "--model",
        str(CONFIGS / "meta-llama--Llama-3.1-70B"),
    )
    assert code == 0 and result["gpus"]["name"] == H100 and result["gpus"]["count"] == 8
    assert result["model"]["params_b"] == pytest.approx(70.55, abs=0.01)
    # 141.1 GB of bf16: 65.7 GiB a GPU on two, with the 16K-token KV floor (2.5 GiB) and
    # 1 GiB of overhead past 0.85 x 80 = 68 GiB: four GPUs.
    assert result["fewest_gpus"] == 4
    assert not by_layout(result)["TP 2"]["fits"] and by_layout(result)["TP 4"]["fits"]


def test_the_plan_says_whether_flash_attn_is_built_and_why(capsys):
    code, result = plan(
        capsys, "--model", str(CONFIGS / "Qwen--Qwen3-32B"), "--gpus", "8", "--gpu-model", H100
    )
    assert code == 0 and result["flash_attn"]["build"] is False
    assert result["flash_attn"]["why"].startswith("not needed: profile dense-bf16 (SGLang default")
