"""What each GPU architecture needs of the driver (data/nvidia.toml [[driver.architectures]]):
the data holds together and names a source for every value, every GPU of data/gpus.toml runs
on the default driver, and an inventory whose branch or flavor runs none of its profile's
architectures is refused by validation, naming host, field and what is allowed."""

from __future__ import annotations

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.driver.nvidia import (
    arch_driver_needs,
    compute_cap_arch,
    driver_mismatches,
    needs_open_modules,
)

ROWS = data.nvidia().driver.architectures


def test_rows_rise_and_every_value_names_its_source():
    assert [row.from_arch for row in ROWS] == sorted({row.from_arch for row in ROWS})
    for row in ROWS:
        values = {k for k in ("min_branch", "max_branch", "modules") if getattr(row, k) is not None}
        assert set(row.sources) == values, row.name
        assert all(len(text) > 40 for text in row.sources.values()), row.name
        assert set(row.modules) <= {"open", "proprietary"} and row.modules, row.name
        if row.min_branch is not None and row.max_branch is not None:
            assert row.min_branch <= row.max_branch, row.name


@pytest.mark.parametrize(
    ("arch", "name", "min_branch", "max_branch", "modules"),
    [
        ("sm_120", "Blackwell", 570, None, ("open",)),
        ("sm_100", "Blackwell", 570, None, ("open",)),
        ("sm_103", "Blackwell", 570, None, ("open",)),
        ("sm_90", "Hopper", 520, None, ("open", "proprietary")),
        ("sm_89", "Ada", 520, None, ("open", "proprietary")),
        ("sm_86", "Ampere", 450, None, ("open", "proprietary")),
        ("sm_75", "Turing", 410, None, ("open", "proprietary")),
        ("sm_70", "Volta", 384, 580, ("proprietary",)),
        ("sm_61", "Pascal", 367, 580, ("proprietary",)),
        ("sm_52", "Maxwell", 340, 580, ("proprietary",)),
        ("sm_37", "Kepler", None, 470, ("proprietary",)),
    ],
)
def test_each_architecture_reads_its_row(arch, name, min_branch, max_branch, modules):
    needs = arch_driver_needs(arch)
    assert (needs.name, needs.min_branch, needs.max_branch, needs.modules) == (
        name,
        min_branch,
        max_branch,
        modules,
    )
    assert needs_open_modules(arch) == (modules == ("open",))


def test_every_spelling_of_an_architecture_reads_the_same_row():
    rows = [arch_driver_needs(spelling) for spelling in ("sm_120", "120", "12.0", "sm_120a")]
    assert all(row == rows[0] for row in rows) and rows[0].arch == "sm_120"
    assert compute_cap_arch("12.0") == "sm_120"
    assert [compute_cap_arch(cap) for cap in ("12", "[N/A]", "", None)] == [None] * 4


def test_unknown_or_unreadable_architectures_are_not_judged():
    assert arch_driver_needs("sm_20") is None
    assert arch_driver_needs("unknown") is None
    assert driver_mismatches("sm_20", 590, "proprietary") == []


def test_every_gpu_the_project_knows_runs_on_the_default_driver():
    from pyinfra_sglang.inventory import HostConfig

    default = HostConfig()
    for name, spec in data.gpus().items():
        assert arch_driver_needs(spec.arch) is not None, name
        assert driver_mismatches(spec.arch, default.nvidia_driver_branch, "open") == [], name


def test_mismatches_name_the_field_and_what_is_allowed():
    [branch, modules] = driver_mismatches("sm_70", 595, "open")
    assert (branch.field, branch.allowed) == ("nvidia_driver_branch", "580")
    assert branch.message == (
        "driver branch 595 cannot run Volta GPUs (sm_70): they run on branches 384 to 580"
    )
    assert (modules.field, modules.allowed) == ("nvidia_kernel_modules", "proprietary")
    [kepler] = driver_mismatches("sm_35", 580, "proprietary")
    assert kepler.allowed == (
        "none of the branches this project installs (580, 590, 595, 610, 615, 620)"
    )
    assert driver_mismatches("sm_90", 580, "proprietary") == []


def validate_problems(tmp_path, **values):
    from pyinfra_sglang.inventory import InventoryError, load_inventory_file, validate_inventory

    # pyinfra caches an inventory by its file name: one file per set of values.
    path = tmp_path / f"inventory{len(list(tmp_path.glob('inventory*.py')))}.py"
    data_ = {"ssh_strict_host_key_checking": "yes", **values}
    path.write_text(f"gpus = [('gpu-1', {data_!r})]\n")
    try:
        validate_inventory(load_inventory_file(str(path)))
    except InventoryError as error:
        return error.problems
    return []


def test_a_branch_that_runs_none_of_the_profiles_gpus_is_refused_by_validate(tmp_path):
    volta_only = {"archs": ["sm_70"]}
    [problem] = validate_problems(
        tmp_path,
        sglang_model_profile="dense-bf16",
        sglang_profile_overrides=volta_only,
        nvidia_kernel_modules="proprietary",
        nvidia_driver_branch=590,
    )
    assert (problem.host, problem.field, problem.value, problem.allowed) == (
        "gpu-1",
        "nvidia_driver_branch",
        "590",
        "580",
    )
    assert "runs on sm_70 only: driver branch 590 cannot run Volta GPUs" in problem.message
    assert (
        validate_problems(
            tmp_path,
            sglang_model_profile="dense-bf16",
            sglang_profile_overrides=volta_only,
            nvidia_kernel_modules="proprietary",
            nvidia_driver_branch=580,
            # CUDA 13 builds nothing for Volta, and needs a newer driver than 580 (validation);
            # PyPI's SGLang has a CUDA 12 install up to 0.5.10.
            cuda_version="12.9",
            sglang_version="0.5.10",
        )
        == []
    )
    # A profile for several architectures is refused only when none of them can run.
    mixed = {"archs": ["sm_70", "sm_90"]}
    assert (
        validate_problems(
            tmp_path,
            sglang_model_profile="dense-bf16",
            sglang_profile_overrides=mixed,
            nvidia_kernel_modules="proprietary",
            nvidia_driver_branch=590,
        )
        == []
    )
