"""flash_attn_build: false skips the ~30 minute flash-attn build; the role says why and
changes nothing, and the audit's flash-attn check follows the field."""

from __future__ import annotations

import pytest

from pyinfra_sglang.audit.drift import findings_for_flash_attn
from pyinfra_sglang.audit.record import AuditExpectations
from pyinfra_sglang.inventory import HostConfig, validate_host_data
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


def test_the_field_defaults_to_building_as_the_reference_deployment_does():
    assert HostConfig().flash_attn_build is True
    config, problems = validate_host_data("gpu1", {"flash_attn_build": False})
    assert problems == [] and config.flash_attn_build is False
    _, [problem] = validate_host_data("gpu1", {"flash_attn_build": "sometimes"})
    assert problem.field == "flash_attn_build" and problem.allowed == "true, false"


def test_with_the_build_off_the_operation_reads_nothing_and_says_why():
    # No fact given: reading any (the venv's packages, the GPUs, memory) fails the test.
    commands, noops = run_operation(role.flash_attn_built, {}, **ARGS, build=False)
    assert commands == [] and noops == [role.BUILD_OFF]
    assert "flash_attn_build: false in the inventory" in role.BUILD_OFF
    assert "docs/packages.md#flash-attn" in role.BUILD_OFF


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


def test_with_the_build_on_the_deploy_is_as_before(monkeypatch):
    calls = []
    monkeypatch.setattr(role, "host_config", lambda host: HostConfig())
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
    def expectations(config):
        return AuditExpectations.from_config(config, "sglang.service", 0)

    assert expectations(HostConfig()).flash_attn_build is True
    assert expectations(HostConfig(flash_attn_build=False)).flash_attn_build is False
