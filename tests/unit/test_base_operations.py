"""Command generation of the base role's own operation, from pyinfra fact inputs."""

from pathlib import Path

import pytest
from pyinfra.facts.deb import DebPackages

from checks.facts import KernelHeaders, Virtualization
from pyinfra_sglang import data
from roles.base import kernel_headers
from roles.common import packages_installed
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"

RELEASE = "6.1.0-27-amd64"
PACKAGE = f"linux-headers-{RELEASE}"
APT = data.apt()
# Every apt-get that installs: non-interactive, keeping changed config files, waiting for
# dpkg's locks (unattended-upgrades holds them on a fresh image).
APT_GET = (
    "DEBIAN_FRONTEND=noninteractive apt-get -y "
    '-o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold" '
    f"-o DPkg::Lock::Timeout={APT.lock_timeout_s}"
)
# apt-get update, retried: it never waits for the lists lock.
ATTEMPTS, DELAY = APT.update_attempts, APT.update_retry_delay_s
APT_UPDATE = (
    'attempt=1; until apt-get update -q; do if [ "$attempt" -ge '
    f'{ATTEMPTS} ]; then echo "apt-get update failed {ATTEMPTS} times" >&2; exit 100; fi; '
    f'echo "apt-get update failed (attempt $attempt of {ATTEMPTS}); retrying in {DELAY} s" '
    f">&2; attempt=$((attempt + 1)); sleep {DELAY}; done"
)


def headers(installed=False, candidate=None, lists=True):
    return {
        "kernel_release": RELEASE,
        "package": PACKAGE,
        "installed": installed,
        "candidate": candidate,
        "apt_lists_present": lists,
    }


def facts(headers_fact, container=None):
    return {
        KernelHeaders: headers_fact,
        Virtualization: {"container": container, "vm": None},
        DebPackages: {},
    }


CASES = [
    op_case(
        kernel_headers,
        "installs-headers-the-distro-ships",
        facts(headers(candidate="6.1.115-1")),
        commands=[f"{APT_GET} install --no-install-recommends {PACKAGE}"],
    ),
    op_case(
        kernel_headers,
        "installed-headers-are-a-noop",
        facts(headers(installed=True, candidate="6.1.115-1")),
        noops=[f"{PACKAGE} is installed"],
    ),
    op_case(
        kernel_headers,
        "headers-the-distro-does-not-ship-are-a-noop-with-the-reason",
        facts(headers(candidate=None, lists=True)),
        noops=[
            f"{PACKAGE} is not shipped by the distro for kernel {RELEASE}; the driver's "
            "DKMS build needs headers from wherever this kernel came from"
        ],
    ),
    op_case(
        kernel_headers,
        "container-is-a-noop-naming-the-container",
        facts(headers(candidate="6.1.115-1"), container="systemd-nspawn"),
        noops=[
            f"{PACKAGE} not installed: in a container (systemd-nspawn) kernel {RELEASE} "
            "and its modules belong to the outer host"
        ],
    ),
    op_case(
        kernel_headers,
        "a-kernel-without-a-flavor-has-no-metapackage-to-follow",
        facts({**headers(), "kernel_release": "6.18.44-fc-v669", "package": "-"}),
        {"package_template": "linux-headers-{flavor}"},
        noops=["kernel 6.18.44-fc-v669 names no distro flavor: no headers metapackage follows it"],
    ),
    op_case(
        kernel_headers,
        "the-flavors-metapackage-is-installed-like-the-running-kernels-headers",
        facts({**headers(candidate="6.1.115-1"), "package": "linux-headers-cloud-amd64"}),
        {"package_template": "linux-headers-{flavor}"},
        commands=[f"{APT_GET} install --no-install-recommends linux-headers-cloud-amd64"],
    ),
    op_case(
        packages_installed,
        "missing-ones-installed-after-an-update",
        {DebPackages: {"curl": ["7.88.1-10"]}},
        {"packages": ["curl", "dkms", "gnupg"]},
        commands=[APT_UPDATE, f"{APT_GET} install --no-install-recommends dkms gnupg"],
    ),
    op_case(
        packages_installed,
        "all-installed-is-a-noop-without-an-update",
        {DebPackages: {"curl": ["7.88.1-10"], "dkms": ["3.0.10-8"]}},
        {"packages": ["curl", "dkms"]},
        noops=["curl, dkms installed"],
    ),
]


@pytest.mark.parametrize(OP_CASE_FIELDS, CASES)
def test_operation_yields_exactly(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


def test_without_apt_lists_updates_then_installs_only_what_the_distro_ships():
    # Captured on the H200 VM (Ubuntu 24.04, Firecracker kernel, apt lists cleaned).
    fact = KernelHeaders().process(
        (FIXTURES / "kernel_headers_ubuntu2404_h200_vm.txt").read_text().splitlines()
    )
    assert fact["apt_lists_present"] is False and fact["candidate"] is None
    package = "linux-headers-6.18.44-fc-v657-gpu"
    # The install the update makes possible takes the same options as the other branch's.
    assert run_operation(kernel_headers, facts(fact)) == (
        [
            f"{APT_UPDATE} && if apt-cache show {package} >/dev/null 2>&1; then "
            f"{APT_GET} install --no-install-recommends {package} ; "
            f"else echo '{package} is not shipped by the distro'; fi"
        ],
        [],
    )


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


@pytest.mark.parametrize(
    ("release", "template", "package"),
    [
        ("6.1.0-28-cloud-amd64", "linux-headers-{flavor}", "linux-headers-cloud-amd64"),
        ("6.1.0-28-amd64", "linux-headers-{flavor}", "linux-headers-amd64"),
        ("6.8.0-45-generic", "linux-headers-{flavor}", "linux-headers-generic"),
        ("6.8.0-1015-aws", "linux-headers-{flavor}", "linux-headers-aws"),
        ("6.18.44-fc-v669", "linux-headers-{flavor}", "-"),
        ("6.18.44-fc-v669", "linux-headers-{kernel_release}", "linux-headers-6.18.44-fc-v669"),
    ],
)
def test_the_headers_fact_names_the_package_from_the_running_kernel(
    tmp_path, release, template, package
):
    # The fact's own command, run by sh with uname, dpkg-query and apt-cache answering as on a
    # host where nothing is installed and apt has no lists.
    import subprocess

    for tool, body in (
        ("uname", f"echo {release}"),
        ("dpkg-query", "exit 1"),
        ("apt-cache", "exit 0"),
    ):
        (tmp_path / tool).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / tool).chmod(0o755)
    output = subprocess.run(
        ["sh", "-c", KernelHeaders().command(package_template=template)],
        capture_output=True,
        text=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        check=True,
    ).stdout
    assert output.splitlines()[:4] == [release, package, "absent", "(none)"]
