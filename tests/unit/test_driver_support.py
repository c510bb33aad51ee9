"""NVIDIA's support of the driver branches and the driver each CUDA toolkit needs
(data/nvidia.toml [[branch_support]], [[cuda_driver_minimum]]): the inventory's refusals,
the audit's findings on its own date, the exact-version pin."""

from __future__ import annotations

import dataclasses

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.audit.drift import findings_for_driver_support, findings_for_driver_toolkit
from pyinfra_sglang.audit.judge import judge
from pyinfra_sglang.driver.nvidia import (
    branch_support,
    driver_below_toolkit,
    pinning_package,
    supported_branches,
    toolkit_driver_minimums,
)
from pyinfra_sglang.inventory import (
    HostConfig,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from tests.unit.test_audit_judge import expectations, h200_facts

NVIDIA_MODEL = data.nvidia()

# The date these facts were checked (docs/sources.md, NVIDIA driver packages and branches).
TODAY = "2026-12-02"
SUPPORTED = "R580 (long-term to 2028-06), R595 (production to 2027-03), R620 (long-term to 2029-09)"


def test_every_branch_the_project_installs_has_its_support_row():
    assert NVIDIA_MODEL.driver_branches == (580, 590, 595, 610, 615, 620)
    assert NVIDIA_MODEL.default_driver_branch == 590  # what the project was asked for
    for branch in NVIDIA_MODEL.driver_branches:
        row = branch_support(branch)
        assert row is not None, branch
        assert row.support in ("long-term", "production", "feature")
        # A feature branch has no published end; the others do.
        assert (row.end_of_support is None) == (row.support == "feature"), branch


def test_supported_branches_follow_the_audits_date():
    assert [r.branch for r in supported_branches(TODAY)] == [580, 595, 620]
    assert [r.branch for r in supported_branches("2027-03-31")] == [580, 595, 620]
    assert [r.branch for r in supported_branches("2027-04-01")] == [580, 620]
    assert [r.branch for r in supported_branches("2028-07-01")] == [620]


def test_the_default_feature_branch_warns_naming_the_supported_ones():
    [finding] = findings_for_driver_support(590, {"version": "590.48.01"}, TODAY)
    assert (finding.level, finding.code) == ("warn", "driver-support")
    assert finding.message == (
        "The pinned driver branch 590 is a short-lived new-feature branch NVIDIA no longer "
        f"lists: no fixes once the next one ships (on {TODAY}). NVIDIA supports {SUPPORTED}: "
        "set nvidia_driver_branch to one of them and run deploy/site.py, then reboot."
    )
    assert finding.evidence["supported"] == [580, 595, 620]


def test_a_supported_branch_is_ok_until_its_end_then_warns():
    [ok] = findings_for_driver_support(595, {"version": "595.58.03"}, TODAY)
    assert (ok.level, ok.message) == (
        "ok",
        f"The pinned driver branch R595 (production to 2027-03) is supported by NVIDIA on {TODAY}.",
    )
    [ended] = findings_for_driver_support(595, {"version": "595.58.03"}, "2027-04-02")
    assert ended.level == "warn"
    assert "595 is R595 (production to 2027-03): its support ended" in ended.message
    assert "NVIDIA supports R580 (long-term to 2028-06), R620" in ended.message


def test_the_running_branch_is_judged_too_when_it_is_not_the_pinned_one():
    found = findings_for_driver_support(620, {"version": "610.43.02"}, TODAY)
    assert [(f.level, f.evidence["branch"]) for f in found] == [("ok", 620), ("warn", 610)]
    assert "The running driver branch 610 is a short-lived" in found[1].message


def test_a_record_without_the_audits_date_is_not_judged():
    assert findings_for_driver_support(590, None, None) == []


def test_the_judge_reads_the_clock_from_the_record():
    # The H200 VM runs 580.159.04 (a long-term branch) with the default inventory (590).
    facts = h200_facts(audited_on=TODAY)
    support = [f for f in judge(expectations(), facts) if f.code == "driver-support"]
    assert [(f.level, f.evidence["branch"]) for f in support] == [("warn", 590), ("ok", 580)]
    later = dataclasses.replace(facts, audited_on="2028-07-01")
    support = [f for f in judge(expectations(), later) if f.code == "driver-support"]
    assert [(f.level, f.evidence["branch"]) for f in support] == [("warn", 590), ("warn", 580)]


# -- the driver each CUDA toolkit needs ------------------------------------------------------


def test_every_cuda_release_the_project_installs_has_its_driver_minimum():
    for release in NVIDIA_MODEL.cuda_versions:
        rows = toolkit_driver_minimums(release)
        assert rows and rows[0].update == "GA", release
    assert [(r.update, r.driver) for r in toolkit_driver_minimums("13.1")] == [
        ("GA", "590.44.01"),
        ("Update 1", "590.48.01"),
    ]


@pytest.mark.parametrize(
    ("release", "branch", "version", "refused"),
    [
        ("13.1", 590, None, None),
        ("13.1", 580, None, "branch 580 is older than 590.48.01"),
        ("13.1", 590, "590.44.01", "590.44.01 is older than 590.48.01"),
        ("13.1", 590, "590.48.01", None),
        ("13.1", 595, "595.58.03", None),
        ("13.0", 580, None, None),
        ("13.0", 580, "580.82.07", "580.82.07 is older than 580.95.05"),
        ("12.8", 580, None, None),
    ],
)
def test_a_driver_older_than_the_toolkits_minimum_is_refused(release, branch, version, refused):
    why = driver_below_toolkit(release, branch, version)
    assert (why if why is None else why.split(":")[0]) == refused


def test_a_branch_below_the_toolkits_minimum_is_planned_on_and_warned_about(tmp_path, monkeypatch):
    # Branch 580 with CUDA 13.1 (Update 1 wants 590.48.01) runs through minor-version
    # compatibility (13.x on >= 580): the real H200 machine runs 580.159.04 with CUDA 13.0.
    for values in (
        {"nvidia_driver_branch": 580},
        {"nvidia_driver_version": "590.44.01"},
        {"nvidia_driver_branch": 580, "nvidia_driver_version": "580.95.05"},
        {"nvidia_driver_branch": 580, "cuda_version": "13.0"},
    ):
        config, problems = validate_host_data("gpu1", values)
        assert problems == [] and config is not None, values
    inventory = tmp_path / "inventory.py"
    inventory.write_text('hosts = [("gpu1", {"nvidia_driver_branch": 580})]\n')
    warnings: list[str] = []
    validate_inventory(load_inventory_file(str(inventory)), warn=warnings.append)
    [warning] = [w for w in warnings if "minor-version compatibility" in w]
    assert warning.startswith(
        "warning: host gpu1: cuda_version 13.1: branch 580 is older than 590.48.01: CUDA "
        "13.1 Update 1 needs driver >= 590.48.01"
    )
    assert "without JIT compilation of newer PTX" in warning


def test_a_branch_below_the_minor_version_floor_is_refused(monkeypatch):
    # The floor comes from data: raise CUDA 12's to above every branch this project installs.
    compat = {**data.nvidia().cuda_minor_version_compat, "12": 999}
    monkeypatch.setattr(
        data,
        "nvidia",
        lambda: data._typed("nvidia", type(NVIDIA_MODEL)).model_copy(
            update={"cuda_minor_version_compat": compat}
        ),
    )
    config, [problem] = validate_host_data(
        "gpu1", {"nvidia_driver_branch": 580, "cuda_version": "12.8"}
    )
    assert (problem.host, problem.field, problem.value) == ("gpu1", "nvidia_driver_branch", "580")
    assert problem.message.startswith(
        "branch 580 does not run CUDA 12.8 programs at all (CUDA minor-version "
        "compatibility: 12.x needs branch 999 or later)"
    )
    # The host's own driver is judged at planning instead.
    _, problems = validate_host_data(
        "gpu1",
        {"nvidia_driver_source": "host", "cuda_version": "12.8", "sglang_version": "0.5.9"},
    )
    assert problems == []


def test_the_exact_version_must_be_a_release_of_the_branch_and_locks_updates_out():
    _, [other] = validate_host_data("gpu1", {"nvidia_driver_version": "595.58.03"})
    assert other.field == "nvidia_driver_version"
    assert "595.58.03 is not a release of nvidia_driver_branch 590" in other.message
    _, [both] = validate_host_data(
        "gpu1", {"nvidia_driver_version": "590.48.01", "nvidia_driver_update_within_branch": True}
    )
    assert both.field == "nvidia_driver_update_within_branch"
    _, [shape] = validate_host_data("gpu1", {"nvidia_driver_version": "590"})
    assert shape.field == "nvidia_driver_version"
    config = HostConfig(nvidia_driver_version="590.48.01")
    assert pinning_package(590, config.nvidia_driver_version) == "nvidia-driver-pinning-590.48.01"
    assert pinning_package(590) == "nvidia-driver-pinning-590"


@pytest.mark.parametrize(
    ("driver", "release", "level"),
    [
        ("590.48.01", "13.1", "ok"),
        ("590.44.01", "13.1", "ok"),  # nvcc does not tell GA from Update 1: GA is the bar
        ("580.159.04", "13.1", "warn"),  # minor-version compatibility only
        ("575.57.08", "13.1", "fail"),  # below 13.x's floor: nothing starts
        ("580.159.04", "13.0", "ok"),
        ("570.26", "12.9", "warn"),
    ],
)
def test_the_audit_checks_the_loaded_driver_against_the_installed_toolkit(driver, release, level):
    nvcc = {"release": release, "version": f"{release}.80"}
    [finding] = findings_for_driver_toolkit({"version": driver, "flavor": "open"}, nvcc)
    assert (finding.code, finding.level) == ("driver-toolkit", level)
    if level == "warn":
        assert "only through minor-version compatibility" in finding.message
    if level == "fail":
        assert "programs do not start on it" in finding.message


def test_the_judge_checks_the_toolkit_on_dated_records_only():
    nvcc = {"release": "13.1", "version": "13.1.80"}
    dated = h200_facts(nvcc=nvcc, audited_on=TODAY)
    [toolkit] = [f for f in judge(expectations(), dated) if f.code == "driver-toolkit"]
    assert toolkit.level == "warn" and "580.159.04" in toolkit.message
    undated = h200_facts(nvcc=nvcc)
    assert not [f for f in judge(expectations(), undated) if f.code == "driver-toolkit"]


def test_a_locked_release_drifts_when_another_runs_and_takes_no_update_warning():
    facts = h200_facts(
        loaded_module={"version": "590.44.01", "flavor": "open"},
        installed_module="590.44.01",
        module_candidate="590.48.01",
    )
    branch_only = judge(expectations(), facts)
    assert "driver-update-available" in {f.code for f in branch_only}
    locked = judge(expectations(nvidia_driver_version="590.48.01"), facts)
    codes = {(f.code, f.level) for f in locked}
    assert ("driver-drift", "fail") in codes
    assert "driver-update-available" not in {code for code, _ in codes}
    # (The captured nvidia-smi still reports 580.159.04: a userspace drift besides.)
    drifts = [f.message for f in locked if f.code == "driver-drift"]
    assert any("the inventory locks 590.48.01 (nvidia_driver_version)" in m for m in drifts)
    assert not any("locks" in f.message for f in branch_only if f.code == "driver-drift")
