"""Command generation of the base role's own operation, from pyinfra fact inputs."""

from pathlib import Path

from pyinfra.facts.deb import DebPackages

from checks.facts import KernelHeaders, Virtualization
from roles.base import kernel_headers
from tests.unit.ophelper import run_operation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"

RELEASE = "6.1.0-27-amd64"
PACKAGE = f"linux-headers-{RELEASE}"


def headers(installed=False, candidate=None, lists=True):
    return {
        "kernel_release": RELEASE,
        "package": PACKAGE,
        "installed": installed,
        "candidate": candidate,
        "apt_lists_present": lists,
    }


def run(headers_fact, container=None):
    return run_operation(
        kernel_headers,
        {
            KernelHeaders: headers_fact,
            Virtualization: {"container": container, "vm": None},
            DebPackages: {},
        },
    )


def test_installs_headers_the_distro_ships():
    commands, noops = run(headers(candidate="6.1.115-1"))
    assert noops == []
    assert len(commands) == 1
    assert "apt-get" in commands[0] and "install" in commands[0]
    assert "--no-install-recommends" in commands[0]
    assert commands[0].endswith(PACKAGE)


def test_without_apt_lists_updates_then_installs_only_what_the_distro_ships():
    # Captured on the H200 VM (Ubuntu 24.04, Firecracker kernel, apt lists cleaned).
    fact = KernelHeaders().process(
        (FIXTURES / "kernel_headers_ubuntu2404_h200_vm.txt").read_text().splitlines()
    )
    assert fact["apt_lists_present"] is False and fact["candidate"] is None
    commands, noops = run(fact)
    assert noops == [] and len(commands) == 1
    assert commands[0].startswith(
        "apt-get update -q && if apt-cache show linux-headers-6.18.44-fc-v657-gpu"
    )
    assert "is not shipped by the distro" in commands[0]


def test_installed_headers_are_a_noop():
    commands, noops = run(headers(installed=True, candidate="6.1.115-1"))
    assert commands == []
    assert noops == [f"{PACKAGE} is installed"]


def test_headers_the_distro_does_not_ship_are_a_noop_with_the_reason():
    commands, noops = run(headers(candidate=None, lists=True))
    assert commands == []
    assert len(noops) == 1
    assert "not shipped by the distro" in noops[0] and RELEASE in noops[0]


def test_container_is_a_noop_naming_the_container():
    commands, noops = run(headers(candidate="6.1.115-1"), container="systemd-nspawn")
    assert commands == []
    assert len(noops) == 1
    assert "systemd-nspawn" in noops[0] and "outer host" in noops[0]


def test_connector_arguments_are_the_running_operations_connector_ones():
    from types import SimpleNamespace

    from checks.host_context import connector_arguments

    running = SimpleNamespace(
        current_op_global_arguments={
            "_sudo": True,
            "_sudo_user": "root",
            "_timeout": 30,
            "_ignore_errors": True,
            "_if": None,
        }
    )
    # Connector arguments travel on to direct connector calls; operation-level ones do not.
    assert connector_arguments(running) == {"_sudo": True, "_sudo_user": "root", "_timeout": 30}
    assert connector_arguments(SimpleNamespace(current_op_global_arguments=None)) == {}
