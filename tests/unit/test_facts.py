"""Fact parsers on output captured from real hosts (tests/fixtures/facts/)."""

from pathlib import Path

from checks.facts import KernelHeaders, Virtualization

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
