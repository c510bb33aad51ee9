"""MoE layouts rendered per SGLang release and refused before any change (issue 28)."""

from __future__ import annotations

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.serving.placement import GpuSet, LayoutError, place
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides
from pyinfra_sglang.serving.render import ServiceSpec, render_service_files
from tests.unit.test_render import flags, placed_args

GLM5 = load_profile("glm-5-nvfp4")


def argv(version: str, **overrides) -> list[str]:
    profile = merge_overrides(GLM5, overrides)
    return placed_args(profile, version, 8, "127.0.0.1", 30000, "/etc/sglang/sglang.yaml")


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        # DP attention: --dp-size with the switch until 0.5.21, --attn-dp-size from 0.5.22.
        ("0.5.9", {"--dp-size": "2", "--enable-dp-attention": True}, ["--attn-dp-size"]),
        ("0.5.21", {"--dp-size": "2", "--enable-dp-attention": True}, ["--attn-dp-size"]),
        ("0.5.22", {"--attn-dp-size": "2"}, ["--dp-size", "--enable-dp-attention"]),
        ("0.5.23", {"--attn-dp-size": "2"}, ["--dp-size", "--enable-dp-attention"]),
    ],
)
def test_dp_attention_spelled_per_release(version, present, absent):
    found = flags(argv(version, ep_size=8, dp_attention_size=2))
    assert found["--ep-size"] == "8"
    for flag, value in present.items():
        assert found[flag] == value
    for flag in absent:
        assert flag not in found


def test_unset_or_one_renders_nothing():
    for words in (argv("0.5.23"), argv("0.5.9", ep_size=1, dp_attention_size=1)):
        assert not {"--ep-size", "--dp-size", "--attn-dp-size", "--moe-a2a-backend"} & set(words)


def test_all_to_all_rendered():
    found = flags(argv("0.5.17", ep_size=8, dp_attention_size=8, moe_a2a_backend="deepep"))
    assert (found["--moe-a2a-backend"], found["--ep-size"]) == ("deepep", "8")


def spec(profile, version="0.5.23", arch="sm_120", gpus=8):
    gpu_set = GpuSet(count=gpus, memory_gb=96, arch=arch, pcie_only=True)
    return ServiceSpec(
        placement=place(profile, gpu_set, sglang_version=version),
        host="127.0.0.1",
        port=30000,
        venv_path="/opt/sglang/venv",
    )


def test_service_files_refuse_a_layout_before_rendering():
    with pytest.raises(LayoutError, match=r"ep_size 4: .* on sm_120 .* allowed: 1 or 8"):
        render_service_files(spec(merge_overrides(GLM5, {"ep_size": 4})))
    with pytest.raises(LayoutError, match=r"dp_attention_size 4 does not divide .* size 2"):
        render_service_files(spec(merge_overrides(GLM5, {"dp_attention_size": 4}), gpus=2))
    # A layout SGLang takes renders.
    files = render_service_files(spec(merge_overrides(GLM5, {"ep_size": 8})))
    assert "--ep-size 8" in files[0].content


def test_render_prints_the_estimate_on_stderr_only(capsys):
    args = ["render", "--profile", "glm-5-nvfp4", "--gpus", "8", "--arch", "sm_120"]
    assert main([*args, "--sglang-version", "0.5.23"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# profile glm-5-nvfp4, SGLang 0.5.23")
    assert "interconnect" not in out
    assert "# interconnect estimate per generated token, glm-5-nvfp4 over 8 GPUs" in err
    assert "link 28 GB/s" in err
    assert "ceiling 8,347 tok/s" in err


def test_the_inventory_refusal_names_host_field_and_what_is_allowed(tmp_path, monkeypatch):
    from tests.unit.test_validate_before_change import SSH_YES, only_problem

    monkeypatch.chdir(tmp_path)
    host = {
        **SSH_YES,
        "sglang_model_profile": "glm-5-nvfp4",
        "expected_gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "expected_gpu_count": 8,
    }
    for folder, overrides, allowed in (
        ("a", {"ep_size": 4}, "allowed: 1 or 8"),
        ("b", {"ep_size": 3}, "allowed: 1, 2, 4, 8, 16, 32, 64, 128, 256"),
        ("c", {"ep_size": 8, "moe_a2a_backend": "mori"}, "allowed: none, deepep"),
    ):
        (tmp_path / folder).mkdir()
        data = {**host, "sglang_profile_overrides": overrides}
        problem = only_problem(tmp_path / folder, {"gpu1": data})
        assert (problem.host, problem.field) == ("gpu1", "sglang_profile_overrides")
        assert allowed in problem.message
