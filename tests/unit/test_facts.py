"""Fact parsers on output captured from real hosts (tests/fixtures/facts/)."""

from pathlib import Path

from checks.facts import (
    AptSourceEntries,
    KernelHeaders,
    NvccRelease,
    NvidiaLoadedModule,
    Virtualization,
)
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
    assert Virtualization().process(["unknown", "unknown"]) == {"container": "unknown", "vm": "unknown"}


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
    command = KernelHeaders().command("linux-headers-{kernel_release}")
    assert 'pkg="linux-headers-$(uname -r)"' in command


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
            "file": "/etc/apt/sources.list", "line": 1, "format": "one-line",
            "uris": ["http://deb.debian.org/debian"], "components": ["main"],
        }
    ]  # fmt: skip


def test_apt_sources_deb822_and_flat_repositories():
    output = [
        "/etc/apt/sources.list.d/debian.sources\t1\tTypes: deb",
        "/etc/apt/sources.list.d/debian.sources\t2\tURIs: http://deb.debian.org/debian",
        "/etc/apt/sources.list.d/debian.sources\t3\tSuites: bookworm bookworm-updates",
        "/etc/apt/sources.list.d/debian.sources\t4\tComponents: main non-free-firmware",
        "/etc/apt/sources.list.d/debian.sources\t5\tSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t1\t# Managed by pyinfra-sglang",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t2\tdeb [signed-by=/k.gpg] https://x/debian12/x86_64/ /",
    ]
    assert AptSourceEntries().process(output) == [
        {
            "file": "/etc/apt/sources.list.d/debian.sources", "line": 4, "format": "deb822",
            "uris": ["http://deb.debian.org/debian"], "components": ["main", "non-free-firmware"],
        }
    ]  # fmt: skip
