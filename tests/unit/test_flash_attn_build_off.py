"""flash-attn is built only where it is needed: an unset flash_attn_build builds it where
the profile's attention backend takes SGLang's flash-attn 2 fallback on the host's GPUs
(fa3 off sm_8x/sm_9x), true always, false never. Without a build the role says why and
changes nothing, and the audit's flash-attn check follows the decision."""

from __future__ import annotations

import pytest

from pyinfra_sglang.audit.drift import findings_for_flash_attn
from pyinfra_sglang.audit.record import AuditExpectations
from pyinfra_sglang.inventory import HostConfig, validate_host_data
from pyinfra_sglang.serving.flash_attn_need import flash_attn_need
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides
from roles import flash_attn as role
from tests.unit.ophelper import run_operation

ARGS = {
    "venv": "/opt/sglang/venvs/v",
    "version": "2.8.3",
    "archs_override": None,
    "memory_fraction": 0.75,
    "cuda_home": "/usr/local/cuda-13.1",
    "index_url": "https://pypi.org/simple",
}
H200 = [{"compute_cap": "9.0"}]
RTX_PRO = [{"compute_cap": "12.0"}] * 2


def test_the_field_defaults_to_building_by_need():
    assert HostConfig().flash_attn_build is None
    config, problems = validate_host_data("gpu1", {"flash_attn_build": False})
    assert problems == [] and config.flash_attn_build is False
    _, [problem] = validate_host_data("gpu1", {"flash_attn_build": "sometimes"})
    assert problem.field == "flash_attn_build"
    assert problem.allowed == "true, false, or unset (by need)"


@pytest.mark.parametrize("arch", ["90", "100", "120", "sm_80"])
@pytest.mark.parametrize("profile", ["dense-bf16", "glm-5-nvfp4", "glm-5-nvfp4-dense"])
def test_the_shipped_profiles_need_no_flash_attn(profile, arch):
    loaded = load_profile(profile)
    if loaded.archs and f"sm_{arch}".replace("sm_sm_", "sm_") not in loaded.archs:
        arch = loaded.archs[0]
    need = flash_attn_need(None, loaded, [arch])
    assert need.build is False
    assert need.why.startswith(f"not needed: profile {profile} (") and "on sm_" in need.why


def test_fa3_off_hopper_and_ampere_needs_it():
    fa3 = merge_overrides(load_profile("dense-bf16"), {"attention_backend": "fa3"})
    need = flash_attn_need(None, fa3, ["12.0"])
    assert need.build is True
    assert "runs the fa3 attention backend on sm_120" in need.why
    assert "falls back to flash-attn 2 for prefill" in need.why
    assert flash_attn_need(None, fa3, ["100", "90"]).build is True  # any GPU off 8.x/9.x
    assert flash_attn_need(None, fa3, ["90", "80"]).build is False  # FA3's own kernels
    assert flash_attn_need(None, fa3, []).build is False  # no architecture known
    # The inventory's word wins either way.
    assert flash_attn_need(True, load_profile("dense-bf16"), ["90"]).build is True
    assert flash_attn_need(False, fa3, ["120"]).why == "flash_attn_build = false in the inventory"


def test_an_arch_table_choosing_fa3_counts_on_that_arch_only():
    profile = merge_overrides(
        load_profile("dense-bf16"), {"arch": {"sm_120": {"attention_backend": "fa3"}}}
    )
    assert flash_attn_need(None, profile, ["120"]).build is True
    assert flash_attn_need(None, profile, ["100"]).build is False


def test_with_the_build_off_the_operation_reads_nothing_and_says_why():
    # No fact given: reading any (the venv's packages, the GPUs, memory) fails the test.
    why = "not needed: profile dense-bf16 (SGLang default on sm_90) takes no path ..."
    commands, noops = run_operation(role.flash_attn_built, {}, **ARGS, build=False, off_reason=why)
    assert commands == [] and noops == [role.build_off(why)]
    assert noops[0].startswith("flash-attn not built (not needed: profile dense-bf16")


def test_with_the_build_off_the_deploy_installs_no_build_requirements(monkeypatch):
    calls = []
    monkeypatch.setattr(role, "host_config", lambda host: HostConfig(flash_attn_build=False))
    monkeypatch.setattr(role, "venv_packages", lambda **kw: calls.append(("requirements", kw)))
    monkeypatch.setattr(role, "flash_attn_built", lambda **kw: calls.append(("built", kw)))
    monkeypatch.setattr(role, "host_build_plan", lambda *a: pytest.fail("no build is planned"))
    monkeypatch.setattr(role, "build_due", lambda *a: pytest.fail("nothing is read"))
    role.flash_attn.__wrapped__()
    [(what, kwargs)] = calls
    assert what == "built" and kwargs["build"] is False
    assert kwargs["off_reason"] == "flash_attn_build = false in the inventory"


def test_with_the_build_on_the_deploy_is_as_before(monkeypatch):
    calls = []
    monkeypatch.setattr(role, "host_config", lambda host: HostConfig(flash_attn_build=True))
    monkeypatch.setattr(role, "venv_packages", lambda **kw: calls.append(("requirements", kw)))
    monkeypatch.setattr(role, "flash_attn_built", lambda **kw: calls.append(("built", kw)))
    monkeypatch.setattr(role, "build_due", lambda *a: (False, "installed"))
    role.flash_attn.__wrapped__()
    assert [what for what, _ in calls] == ["requirements", "built"]
    assert "build" not in calls[1][1]  # the operation's default: on


# --- the audit -----------------------------------------------------------------------------


def judged(flash_attn, gpus, build=True, version="2.8.3", archs=None):
    return [
        (f.level, f.code, f.message)
        for f in findings_for_flash_attn(version, archs, flash_attn, gpus, build)
    ]


def test_with_the_build_off_a_missing_flash_attn_is_ok():
    assert judged(None, RTX_PRO, build=False) == [
        (
            "ok",
            "flash-attn-off",
            "flash-attn is not built: flash_attn_build is false in the inventory; none in the "
            "venv.",
        )
    ]
    # With the build on, a missing one is left to the next deploy (as before).
    assert judged(None, RTX_PRO) == []


def test_with_the_build_off_a_flash_attn_found_anyway_is_reported():
    present = {"installed": "2.8.3", "built_archs": ["120"]}
    assert judged(present, RTX_PRO, build=False) == [
        (
            "ok",
            "flash-attn-off",
            "flash-attn is not built: flash_attn_build is false in the inventory; the venv has "
            "flash-attn 2.8.3 anyway, built for 120.",
        )
    ]
    # Another version than the pin: still reported (the build being off, none is pinned).
    other = {"installed": "2.7.4", "built_archs": ["90"]}
    [(level, code, message)] = judged(other, RTX_PRO, build=False)
    assert (level, code) == ("warn", "flash-attn-off")
    assert "flash-attn 2.7.4 anyway, built for 90, without the GPUs' 120" in message
    [(level, _, message)] = judged({"installed": "2.8.3", "built_archs": None}, H200, False)
    assert level == "warn" and "its build record names no CUDA architectures" in message


def test_with_the_build_on_the_judgement_is_unchanged():
    present = {"installed": "2.8.3", "built_archs": ["120"]}
    assert judged(present, RTX_PRO) == [
        ("ok", "flash-attn", "flash-attn 2.8.3 built for 120 (the GPUs' 120).")
    ]
    [(level, code, _)] = judged({"installed": "2.8.3", "built_archs": ["90"]}, RTX_PRO)
    assert (level, code) == ("fail", "flash-attn-arch-mismatch")


def test_the_audit_expects_what_the_inventory_says():
    def expectations(config, need=None):
        return AuditExpectations.from_config(config, "sglang.service", 0, need)

    assert expectations(HostConfig(flash_attn_build=True)).flash_attn_build is True
    assert expectations(HostConfig(flash_attn_build=False)).flash_attn_build is False
    not_needed = flash_attn_need(None, load_profile("dense-bf16"), ["90"])
    expected = expectations(HostConfig(), not_needed)
    assert expected.flash_attn_build is False
    assert expected.flash_attn_off_reason == not_needed.why
    [(level, code, message)] = [
        (f.level, f.code, f.message)
        for f in findings_for_flash_attn("2.8.3", None, None, H200, False, not_needed.why)
    ]
    assert (level, code) == ("ok", "flash-attn-off")
    assert message.startswith("flash-attn is not built: not needed: profile dense-bf16")
