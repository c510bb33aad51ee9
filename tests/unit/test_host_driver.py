"""The host's own driver: where it came from, what managed mode refuses, what host mode
checks (pyinfra_sglang/driver/host_driver.py), on real package names and versions
(tests/fixtures/ubuntu-archive/, tests/fixtures/nvidia-repo/) and the real 2x H200 VM."""

from __future__ import annotations

import pytest

from pyinfra_sglang.driver.host_driver import (
    archive_driver_packages,
    archive_package_reason,
    driver_origin,
    foreign_driver,
    host_driver_problems,
    minor_version_note,
    parse_host_driver_state,
    running_driver,
)
from tests.unit.captures import captured_lines

H200_NVCC = "/usr/local/cuda-13.0/bin/nvcc"
H200_VM = {"container": None, "vm": "kvm"}


def h200_gpus() -> list[dict]:
    return [
        {
            "index": str(i),
            "name": "NVIDIA H200",
            "driver_version": "580.159.04",
            "compute_cap": "9.0",
        }
        for i in range(2)
    ]


def test_the_state_lists_runfile_markers_and_each_toolkits_release():
    # nvcc's release line as the real CUDA 13.0 nvcc of the H200 VM prints it.
    [banner] = [
        line
        for line in captured_lines("h200x2-nvlink-vm", "nvcc --version")
        if line.startswith("Cuda compilation tools")
    ]
    state = parse_host_driver_state(
        [
            "runfile /usr/bin/nvidia-uninstall",
            f"nvcc /usr/local/cuda-13/bin/nvcc {banner}",
            f"nvcc {H200_NVCC} {banner}",
            "nvcc /usr/local/cuda-broken/bin/nvcc ",
        ]
    )
    assert state == {"runfile": ["/usr/bin/nvidia-uninstall"], "toolkits": {"13.0": H200_NVCC}}


@pytest.mark.parametrize(
    ("name", "version", "archive"),
    [
        # Ubuntu's archive (tests/fixtures/ubuntu-archive/, as packages.ubuntu.com lists them)
        ("nvidia-driver-580-server", "580.159.03-0ubuntu0.25.10.1", True),
        ("nvidia-dkms-550-server-open", "550.144.03-0ubuntu0.24.04.1", True),
        ("nvidia-dkms-580-open", "580.178.04-0ubuntu1", True),
        ("linux-modules-nvidia-580-server-generic", "6.8.0-149.149", True),
        ("linux-modules-nvidia-575-6.8.0-64-generic", "6.8.0-64.67+1", True),
        ("libnvidia-extra-570-server", "570.172.08-0ubuntu2", True),
        ("nvidia-fabricmanager-580", "580.159.03-0ubuntu0.24.04.1", True),
        # Debian's own non-free build
        ("nvidia-driver", "535.247.01-1~deb12u1", True),
        # NVIDIA's repository (tests/fixtures/nvidia-repo/README.md)
        ("libnvidia-compute-580", "580.159.04-1", False),
        ("nvidia-open", "610.43.02-1ubuntu1", False),
        ("nvidia-driver-cuda", "590.48.01-1", False),
    ],
)
def test_the_distributions_builds_are_told_from_nvidias(name, version, archive):
    assert (archive_package_reason(name, version) is not None) == archive


def test_managed_mode_finds_archive_packages_orphan_modules_and_a_runfile():
    installed = {
        "nvidia-driver-580-server": ["580.159.03-0ubuntu0.25.10.1"],
        "nvidia-utils-580-server": ["580.159.03-0ubuntu0.25.10.1"],
        "nvidia-driver-pinning-590": ["590.48.01-1"],
        "nvidia-driver-cuda": ["590.48.01-1"],
        "openssh-server": ["1:9.2p1-2+deb12u3"],  # a ~deb revision, not a driver package
    }
    assert [p.name for p in archive_driver_packages(installed)] == [
        "nvidia-driver-580-server",
        "nvidia-utils-580-server",
    ]
    dkms = {"kernels": ["6.8.0-45-generic"], "built": {"6.8.0-45-generic": ["590.48.01", "575.64"]}}
    found = foreign_driver(installed, dkms, ["/usr/bin/nvidia-uninstall"])
    assert found.dkms == ("nvidia/575.64",)
    assert not found.removable()
    assert found.found()[-1] == "/usr/bin/nvidia-uninstall (NVIDIA's runfile installer)"
    assert "nvidia-uninstall" in found.ways_out()[1]
    assert not foreign_driver({"nvidia-driver-cuda": ["590.48.01-1"]}, {"built": {}}, [])


def test_where_the_driver_came_from():
    ubuntu = {"nvidia-utils-580-server": ["580.178.04-0ubuntu1"]}
    assert driver_origin("nvidia-utils-580-server", ubuntu, [], H200_VM) == (
        "the distribution's archive (nvidia-utils-580-server 580.178.04-0ubuntu1)"
    )
    nvidia = {"nvidia-driver-cuda": ["590.48.01-1"]}
    assert driver_origin("nvidia-driver-cuda", nvidia, [], {}) == (
        "NVIDIA's packages (nvidia-driver-cuda 590.48.01-1)"
    )
    runfile = ["/usr/bin/nvidia-uninstall"]
    assert driver_origin(None, {}, runfile, {}).startswith("NVIDIA's runfile installer")
    assert driver_origin(None, {}, [], {"container": "docker", "vm": None}) == (
        "the outer host of this container (docker)"
    )
    # The real H200 VM: its nvidia-smi is no package's (tests/fixtures/facts/README.md).
    assert driver_origin(None, {}, [], H200_VM) == (
        "outside the package manager (no package owns nvidia-smi; a kvm VM)"
    )


def h200(cuda: str = "13.0", flash_attn: bool = True, toolkits=None):
    running = running_driver(
        {"version": "580.159.04", "flavor": "open"}, h200_gpus(), None, {}, [], H200_VM
    )
    toolkits = {"13.0": H200_NVCC} if toolkits is None else toolkits
    return host_driver_problems(running, h200_gpus(), cuda, flash_attn, toolkits)


def test_the_real_h200_vm_serves_cuda_13_0_as_it_is():
    assert h200() == []
    assert minor_version_note("13.0", "580.159.04") is None


def test_cuda_13_1_on_it_runs_through_minor_version_compatibility_but_needs_its_nvcc():
    [problem] = h200(cuda="13.1")
    assert problem.field == "flash_attn_build"
    assert problem.message.startswith(
        "flash-attn is built with /usr/local/cuda-13.1/bin/nvcc, and this host has the "
        "toolkits 13.0 (/usr/local/cuda-13.0/bin/nvcc)"
    )
    assert h200(cuda="13.1", flash_attn=False) == []
    note = minor_version_note("13.1", "580.159.04")
    assert note.startswith("driver 580.159.04 is older than CUDA 13.1 needs (CUDA 13.1 Update 1")
    assert "without JIT compilation of newer PTX" in note


def test_no_toolkit_at_all_is_named():
    [problem] = h200(toolkits={})
    assert "this host has no CUDA toolkit" in problem.message


def test_a_driver_below_the_cuda_majors_floor_is_refused_with_what_it_runs():
    running = running_driver({"version": "575.64", "flavor": "open"}, [], None, {}, [], H200_VM)
    [problem] = host_driver_problems(running, [], "13.0", False, {})
    assert problem.field == "cuda_version"
    assert "need driver branch 580 or later" in problem.message
    assert "the host runs 575.64" in problem.message
    assert "allowed: 12.8, 12.9" in problem.message


def test_a_driver_the_gpus_architecture_cannot_run_is_refused():
    blackwell = [{"index": "0", "name": "NVIDIA B200", "compute_cap": "10.0"}]
    proprietary = running_driver(
        {"version": "580.95.05", "flavor": "proprietary"}, blackwell, None, {}, [], {}
    )
    [problem] = host_driver_problems(proprietary, blackwell, "13.0", False, {})
    assert problem.field == "nvidia_driver_source"
    assert "the host's driver 580.95.05 (proprietary" in problem.message
    assert "cannot run GPU 0: kernel modules:" in problem.message
    # Flavor unknown (only nvidia-smi told the version): judged on the branch alone.
    unknown = running_driver(
        None, [{**blackwell[0], "driver_version": "580.95.05"}], None, {}, [], {}
    )
    assert host_driver_problems(unknown, blackwell, "13.0", False, {}) == []


def test_no_running_driver_is_refused():
    none = running_driver(None, [], None, {}, [], {})
    [problem] = host_driver_problems(none, [], "13.0", False, {})
    assert problem.field == "nvidia_driver_source"
    assert "needs a running NVIDIA driver; this host has none" in problem.message


def test_the_audit_judges_the_h200_vms_own_driver_as_expected():
    from pyinfra_sglang.audit.judge import judge
    from tests.unit.test_audit_judge import codes, expectations, h200_facts

    nvcc = {"release": "13.0", "version": "13.0.88"}
    host = expectations(nvidia_driver_source="host", cuda_version="13.0")
    findings = judge(host, h200_facts(nvcc=nvcc, audited_on="2026-12-03"))
    assert "driver-drift" not in codes(findings) and "cuda-drift" not in codes(findings)
    [driver] = [f for f in findings if f.code == "driver"]
    assert driver.level == "ok"
    assert driver.message.startswith("driver 580.159.04 (open) loaded: the host's own")
    # 580 is NVIDIA's long-term branch: supported, and never "set nvidia_driver_branch".
    assert all("deploy/site.py" not in f.message for f in findings if f.code.startswith("driver"))
    # The managed inventory calls the same host drift and says to converge it.
    managed = judge(expectations(cuda_version="13.0"), h200_facts(nvcc=nvcc))
    assert "driver-drift" in codes(managed, "fail")


def test_the_audit_names_a_missing_host_toolkit_without_advising_the_deploy():
    from pyinfra_sglang.audit.judge import judge
    from tests.unit.test_audit_judge import expectations, h200_facts

    nvcc = {"release": "13.0", "version": "13.0.88"}
    for build, level in ((True, "fail"), (False, "warn")):
        host = expectations(nvidia_driver_source="host", flash_attn_build=build)
        [cuda] = [f for f in judge(host, h200_facts(nvcc=nvcc)) if f.code == "cuda-drift"]
        assert cuda.level == level
        assert cuda.message.startswith(
            "No CUDA Toolkit 13.1 at /usr/local/cuda-13.1/bin/nvcc (found: CUDA 13.0 (13.0.88)); "
            'nvidia_driver_source = "host" installs none.'
        )
        assert "deploy/site.py" not in cuda.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nvidia_driver_version", "590.48.01"),
        ("nvidia_driver_update_within_branch", True),
        ("nvidia_driver_remove_foreign", True),
    ],
)
def test_settings_of_an_installed_driver_contradict_the_hosts_own(field, value):
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("gpu1", {"nvidia_driver_source": "host", field: value})
    assert problem.field == field
    assert problem.message.startswith(
        'nvidia_driver_source = "host" uses the driver the host runs; '
        f"{field} sets up the one the deploy installs"
    )
    config, problems = validate_host_data("gpu1", {"nvidia_driver_source": "managed", field: value})
    assert problems == [] and config is not None
