"""Fact parsers on output captured from real hosts (tests/fixtures/facts/)."""

from pathlib import Path

import pytest

from checks.facts import (
    AptSourceEntries,
    KernelHeaders,
    MemoryInfo,
    NvccRelease,
    NvidiaGpus,
    NvidiaLoadedModule,
    PythonPackages,
    PythonVersion,
    Virtualization,
)
from checks.gpu_load import sampled_load_command
from tests.unit.captures import captured_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_virtualization_in_a_container_inside_a_vm():
    fact = Virtualization().process(lines("virtualization_nspawn_in_firecracker.txt"))
    assert fact == {"container": "systemd-nspawn", "vm": "kvm"}


def test_virtualization_on_bare_metal():
    # systemd-detect-virt prints "none" for each question on bare metal.
    assert Virtualization().process(["none", "none"]) == {"container": None, "vm": None}


def test_virtualization_without_systemd_detect_virt():
    assert Virtualization().process(["unknown", "unknown"]) == {
        "container": "unknown",
        "vm": "unknown",
    }
    # No systemd-detect-virt in the H200 Firecracker VM; its CPU flags name a hypervisor.
    assert Virtualization().process(["unknown", "hypervisor"]) == {
        "container": "unknown",
        "vm": "hypervisor",
    }


def test_kernel_headers_the_distro_does_not_ship():
    fact = KernelHeaders().process(lines("kernel_headers_nspawn_in_firecracker.txt"))
    assert fact == {
        "kernel_release": "6.18.44-fc-v657",
        "package": "linux-headers-6.18.44-fc-v657",
        "installed": False,
        "candidate": None,
        "apt_lists_present": True,
    }


def test_kernel_headers_command_uses_the_running_kernel():
    # The template's text quoted, the release the shell read from uname put in.
    command = KernelHeaders().command("linux-headers-{kernel_release}")
    assert command.startswith("release=$(uname -r); flavor=")
    assert ' pkg=linux-headers-"$release"; echo "$release"; ' in command


def test_the_sampled_load_takes_only_numbers_for_its_timing():
    # The load itself is one quoted word; the interval and the timeout must be numbers.
    command = sampled_load_command("sleep 1; echo done", interval_s=0.5, timeout_s=30)
    assert "sleep 0.5; done" in command and "timeout 30 sh -c 'sleep 1; echo done'" in command
    with pytest.raises(ValueError):
        sampled_load_command("true", interval_s="0.2; injected")


def test_loaded_open_module_on_the_h200_vm():
    output = captured_lines("h200x2-nvlink-vm", "cat /proc/driver/nvidia/version")
    assert NvidiaLoadedModule().process(output) == {"version": "580.159.04", "flavor": "open"}


def test_loaded_proprietary_module_banner():
    # The proprietary module's banner has no "Open Kernel Module" and a build date.
    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
    assert NvidiaLoadedModule().process([line]) == {"version": "550.54.14", "flavor": "proprietary"}


def test_no_module_loaded():
    assert NvidiaLoadedModule().process([]) is None


def test_nvcc_release_on_the_h200_vm():
    output = captured_lines("h200x2-nvlink-vm", "nvcc --version")
    assert NvccRelease().process(output) == {"release": "13.0", "version": "13.0.88"}


def test_no_nvcc():
    assert NvccRelease().process([]) is None


def test_apt_sources_one_line_debian_12():
    # /etc/apt/sources.list of a Debian 12 test host, as the fact's command prints it.
    output = lines("apt_sources_debian12_debootstrap.txt")
    assert AptSourceEntries().process(output) == [
        {
            "file": "/etc/apt/sources.list",
            "line": 1,
            "format": "one-line",
            "uris": ["http://deb.debian.org/debian"],
            "components": ["main"],
        }
    ]


def test_apt_sources_deb822_and_flat_repositories():
    output = [
        "/etc/apt/sources.list.d/debian.sources\t1\tTypes: deb",
        "/etc/apt/sources.list.d/debian.sources\t2\tURIs: http://deb.debian.org/debian",
        "/etc/apt/sources.list.d/debian.sources\t3\tSuites: bookworm bookworm-updates",
        "/etc/apt/sources.list.d/debian.sources\t4\tComponents: main non-free-firmware",
        "/etc/apt/sources.list.d/debian.sources\t5\t"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t1\t# Managed by pyinfra-sglang",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t2\t"
        "deb [signed-by=/k.gpg] https://x/debian12/x86_64/ /",
    ]
    assert AptSourceEntries().process(output) == [
        {
            "file": "/etc/apt/sources.list.d/debian.sources",
            "line": 4,
            "format": "deb822",
            "uris": ["http://deb.debian.org/debian"],
            "components": ["main", "non-free-firmware"],
        }
    ]


QUERY = (
    "nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,"
    "pcie.link.width.max,persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm "
    "--format=csv"
)


def test_nvidia_gpus_on_the_h200_vm():
    gpus = NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY))
    assert [g["index"] for g in gpus] == ["0", "1"]
    first = gpus[0]
    assert first["name"] == "NVIDIA H200" and first["compute_cap"] == "9.0"
    assert first["pcie.link.gen.max"] == "5" and first["pcie.link.width.current"] == "16"
    assert first["pcie.link.gen.hostmax"] is None  # [N/A]
    assert first["memory.total"] == "143771 MiB"


def test_nvidia_gpus_command_is_the_captured_query():
    assert QUERY in NvidiaGpus().command()


def test_nvidia_gpus_two_samples_judge_the_last():
    lines = captured_lines("h200x2-nvlink-vm", QUERY)
    second = [lines[0], lines[1].replace(", 5, 5, 5,", ", 1, 5, 5,")]
    gpus = NvidiaGpus().process(lines + second)
    assert len(gpus) == 1 and gpus[0]["pcie.link.gen.current"] == "1"


def test_nvidia_gpus_without_a_driver():
    output = ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    assert NvidiaGpus().process(output) == []


def test_memory_info():
    fact = MemoryInfo().process(lines("meminfo_ci_machine.txt"))
    assert fact["total_kb"] > fact["available_kb"] > 0


def test_python_packages_from_dist_info_folders():
    output = [
        "/opt/sglang/venv/lib/python3.11/site-packages/flash_attn-2.8.3.dist-info",
        "/opt/sglang/venv/lib/python3.11/site-packages/sglang-0.5.23.dist-info",
        "/opt/sglang/venv/lib/python3.11/site-packages/torch-2.14.1+cu130.dist-info",
    ]
    assert PythonPackages().process(output) == {
        "flash-attn": "2.8.3",
        "sglang": "0.5.23",
        "torch": "2.14.1+cu130",
    }


def test_python_version():
    assert PythonVersion().process(["Python 3.11.2"]) == "3.11.2"
    assert PythonVersion().process([]) is None


def test_apt_sources_deb822_on_ubuntu_24_04():
    # Captured on the H200 VM: sources.list holds only comments, ubuntu.sources two stanzas.
    entries = AptSourceEntries().process(lines("apt_sources_ubuntu2404_h200_vm.txt"))
    assert [(e["line"], e["uris"], e["components"]) for e in entries] == [
        (
            35,
            ["http://archive.ubuntu.com/ubuntu/"],
            ["main", "universe", "restricted", "multiverse"],
        ),
        (
            43,
            ["http://security.ubuntu.com/ubuntu/"],
            ["main", "universe", "restricted", "multiverse"],
        ),
    ]
    assert {e["file"] for e in entries} == {"/etc/apt/sources.list.d/ubuntu.sources"}


def test_memory_info_on_the_h200_vm():
    assert MemoryInfo().process(lines("meminfo_h200_vm.txt")) == {
        "total_kb": 131981020,
        "available_kb": 131488796,
    }
