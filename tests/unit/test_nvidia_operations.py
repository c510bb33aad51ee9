"""Command generation of the NVIDIA repo, driver and CUDA roles from pyinfra fact inputs,
and the reboot decision (loaded vs installed version in, reboot or "reboot required" out)."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.server import Which

from checks.facts import AptSourceEntries, NvccRelease, NvidiaLoadedModule, Virtualization
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.nvidia import (
    cuda_paths,
    driver_packages,
    kernel_module_package,
    upstream_version,
)
from roles.cuda_toolkit import nvcc_reports_release
from roles.nvidia_driver import (
    decide_driver_reboot,
    driver_branch_pin,
    driver_packages_on_branch,
    driver_reboot,
    rebuild_initramfs,
    stale_driver_packages,
)
from roles.nvidia_repo import apt_components
from tests.unit.ophelper import run_operation

COMPUTE_OPEN = ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils", "nvidia-persistenced"]
ON_590 = {p: ["590.48.01-1"] for p in COMPUTE_OPEN}
ON_595 = {p: ["595.58.03-1"] for p in COMPUTE_OPEN}
NO_CONTAINER = {"container": None, "vm": None}


# -- the branch pin ---------------------------------------------------------------------------


def test_pin_is_installed_first_time():
    commands, noops = run_operation(driver_branch_pin, {DebPackages: {}}, branch=590)
    assert noops == [] and len(commands) == 1
    assert commands[0].endswith("install nvidia-driver-pinning-590")


def test_pin_swap_replaces_the_other_branch_in_one_transaction():
    installed = {"nvidia-driver-pinning-590": ["590.48.01-1"], **ON_590}
    commands, _ = run_operation(driver_branch_pin, {DebPackages: installed}, branch=595)
    assert len(commands) == 1
    assert commands[0].endswith("install nvidia-driver-pinning-595 nvidia-driver-pinning-590-")


def test_pin_in_place_is_a_noop():
    installed = {"nvidia-driver-pinning-590": ["590.48.01-1"]}
    commands, noops = run_operation(driver_branch_pin, {DebPackages: installed}, branch=590)
    assert commands == [] and noops == ["nvidia-driver-pinning-590 is installed"]


# -- the driver packages ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("installed", "branch", "changes"),
    [({}, 590, True), (ON_590, 590, False), (ON_595, 590, True), (ON_590, 595, True)],
    ids=["fresh", "in-place", "down-to-590", "up-to-595"],
)
def test_driver_packages_follow_the_branch(installed, branch, changes):
    commands, noops = run_operation(
        driver_packages_on_branch, {DebPackages: installed}, packages=COMPUTE_OPEN, branch=branch
    )
    if changes:
        assert len(commands) == 1 and noops == []
        assert "install --no-install-recommends --allow-downgrades" in commands[0]
        assert commands[0].endswith(" ".join(COMPUTE_OPEN))
    else:
        assert commands == [] and noops == [f"{', '.join(COMPUTE_OPEN)} are on branch {branch}"]


def test_stale_packages_and_upstream_versions():
    assert upstream_version("590.48.01-1") == "590.48.01"
    assert upstream_version("1:595.58.03-0ubuntu1") == "595.58.03"
    partly = {**ON_590, "nvidia-utils": ["595.58.03-1"]}
    assert stale_driver_packages(partly, COMPUTE_OPEN, 590) == ["nvidia-utils"]


# -- the reboot decision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loaded", "installed", "changing", "container", "allow", "action"),
    [
        ("590.48.01", "590.48.01", False, None, False, "none"),
        ("580.159.04", "590.48.01", False, None, False, "required"),
        ("580.159.04", "590.48.01", False, None, True, "reboot"),
        (None, "590.48.01", False, None, True, "reboot"),
        ("590.48.01", "590.48.01", True, None, False, "required"),
        ("590.48.01", "590.48.01", True, None, True, "reboot"),
        (None, None, False, None, True, "none"),
        ("580.159.04", "590.48.01", True, "systemd-nspawn", True, "none"),
    ],
)
def test_reboot_decision(loaded, installed, changing, container, allow, action):
    decision = decide_driver_reboot(loaded, installed, changing, container, allow)
    assert decision.action == action
    if action != "none":
        assert (loaded or "no NVIDIA module") in decision.reason


def reboot_facts(loaded, installed, container=None, marked=False):
    return {
        NvidiaLoadedModule: {"version": loaded, "flavor": "open"} if loaded else None,
        DebPackages: {"nvidia-dkms-open": [installed]} if installed else {},
        Virtualization: {"container": container, "vm": None},
        File: {"mode": 644} if marked else None,
    }


def test_reboot_required_marks_the_host_once():
    facts = reboot_facts("580.159.04", "590.48.01-1")
    args = {"module_package": "nvidia-dkms-open", "allow_reboot": False, "changing": False}
    commands, noops = run_operation(driver_reboot, facts, **args)
    assert commands == [
        "touch /run/reboot-required && echo nvidia-dkms-open >> /run/reboot-required.pkgs"
    ]
    commands, noops = run_operation(
        driver_reboot, reboot_facts("580.159.04", "590.48.01-1", marked=True), **args
    )
    assert commands == [] and noops[0].startswith("already marked reboot-required")


def test_allowed_reboot_reboots_and_waits():
    facts = reboot_facts("580.159.04", "590.48.01-1")
    commands, noops = run_operation(
        driver_reboot, facts, module_package="nvidia-dkms-open", allow_reboot=True, changing=False
    )
    assert noops == [] and len(commands) == 2
    assert "touch /run/pyinfra-sglang-reboot-pending" in commands[0]
    assert "systemctl reboot" in commands[0]
    assert "_wait_for_reboot" in commands[1]


def test_container_never_reboots_for_the_driver():
    facts = reboot_facts(None, "590.48.01-1", container="systemd-nspawn")
    commands, noops = run_operation(
        driver_reboot, facts, module_package="nvidia-dkms-open", allow_reboot=True, changing=True
    )
    assert commands == [] and "systemd-nspawn" in noops[0]


# -- initramfs, apt components ----------------------------------------------------------------


def test_initramfs_rebuild():
    facts = {Virtualization: NO_CONTAINER, Which: "/usr/sbin/update-initramfs"}
    assert run_operation(rebuild_initramfs, facts) == (["update-initramfs -u"], [])
    facts = {Virtualization: NO_CONTAINER, Which: None}
    commands, noops = run_operation(rebuild_initramfs, facts)
    assert commands == [] and "not installed" in noops[0]
    facts = {Virtualization: {"container": "lxc", "vm": None}, Which: "/usr/sbin/update-initramfs"}
    commands, noops = run_operation(rebuild_initramfs, facts)
    assert commands == [] and "lxc" in noops[0]


def entry(file, line, components, fmt="one-line"):
    return {
        "file": file,
        "line": line,
        "format": fmt,
        "uris": ["http://deb.debian.org/debian"],
        "components": components,
    }


def test_contrib_is_added_where_main_is():
    entries = [
        entry("/etc/apt/sources.list", 1, ["main"]),
        entry("/etc/apt/sources.list", 2, ["main", "contrib"]),
        entry("/etc/apt/sources.list.d/debian.sources", 4, ["main", "non-free-firmware"], "deb822"),
        entry("/etc/apt/sources.list.d/other.list", 1, ["stable"]),
    ]
    commands, noops = run_operation(
        apt_components, {AptSourceEntries: entries}, components=["contrib"]
    )
    assert noops == []
    assert commands == [
        "sed -i '1s/[[:space:]]*$/ contrib/' /etc/apt/sources.list",
        "sed -i '4s/[[:space:]]*$/ contrib/' /etc/apt/sources.list.d/debian.sources",
    ]


def test_contrib_present_is_a_noop():
    entries = [entry("/etc/apt/sources.list", 1, ["main", "contrib"])]
    commands, noops = run_operation(
        apt_components, {AptSourceEntries: entries}, components=["contrib"]
    )
    assert commands == [] and noops == ["apt sources already have contrib"]


# -- CUDA -------------------------------------------------------------------------------------


def test_cuda_paths_come_from_the_version():
    paths = cuda_paths("13.1")
    assert paths["package"] == "cuda-toolkit-13-1"
    assert paths["nvcc"] == "/usr/local/cuda-13.1/bin/nvcc"


def test_nvcc_check_from_facts_and_on_the_host():
    nvcc = "/usr/local/cuda-13.1/bin/nvcc"
    commands, noops = run_operation(
        nvcc_reports_release,
        {NvccRelease: {"release": "13.1", "version": "13.1.80"}},
        nvcc=nvcc,
        release="13.1",
    )
    assert commands == [] and noops == [f"{nvcc} reports release 13.1 (V13.1.80)"]
    # nvcc installed by this very run: checked on the host after the install.
    commands, noops = run_operation(
        nvcc_reports_release, {NvccRelease: None}, nvcc=nvcc, release="13.1"
    )
    assert (
        len(commands) == 1 and "grep -q 'release 13.1,'" in commands[0] and "exit 1" in commands[0]
    )


def test_nvcc_reporting_another_release_fails_before_changes():
    with pytest.raises(OperationError, match="reports CUDA release 13.0 .* expected 13.1"):
        run_operation(
            nvcc_reports_release,
            {NvccRelease: {"release": "13.0", "version": "13.0.88"}},
            nvcc="/usr/local/cuda-13.1/bin/nvcc",
            release="13.1",
        )


@pytest.mark.parametrize(
    ("install", "modules", "packages", "module_package"),
    [
        ("compute", "open", COMPUTE_OPEN, "nvidia-dkms-open"),
        (
            "compute",
            "proprietary",
            ["libnvidia-compute", "nvidia-dkms", "nvidia-utils", "nvidia-persistenced"],
            "nvidia-dkms",
        ),
        ("full", "open", ["nvidia-open", "nvidia-persistenced"], "nvidia-dkms-open"),
        ("full", "proprietary", ["cuda-drivers", "nvidia-persistenced"], "nvidia-dkms"),
    ],
)
def test_driver_packages_per_install_kind_and_flavor(install, modules, packages, module_package):
    config = HostConfig(nvidia_driver_install=install, nvidia_kernel_modules=modules)
    assert driver_packages(config) == packages
    assert kernel_module_package(config) == module_package
