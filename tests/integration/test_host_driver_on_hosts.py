"""A host whose provider installed Ubuntu's own NVIDIA driver and a CUDA 13.0 toolkit
(tests/hosts/ubuntu_archive.py): managed mode refuses it before any change, naming what it
found and both ways out; host mode serves SGLang on it as it is; the explicit switch
replaces it with NVIDIA's packages. Every apply is repeated: the second changes nothing."""

from __future__ import annotations

import shutil

import pytest

from tests.hosts import ubuntu_archive
from tests.hosts.apply import apply, write_inventory
from tests.hosts.audit_report import findings
from tests.integration.conftest import open_standin_record

pytestmark = pytest.mark.hosts

HOST_MODE = ("--data", 'nvidia_driver_source="host"')
SWITCH = ("--data", "nvidia_driver_remove_foreign=True")
NVIDIA_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


@pytest.fixture(scope="module")
def provider_host(host_pool, tmp_path_factory):
    """A fresh test host holding the provider's packages, as an image would."""
    [test_host] = host_pool.boot(1)
    debs = ubuntu_archive.build(tmp_path_factory.mktemp("ubuntu-archive"))
    folder = test_host.root / "root/provider-debs"
    folder.mkdir()
    for deb in debs:
        shutil.copy(deb, folder)
    host_pool.run(test_host, "dpkg -i " + " ".join(f"/root/provider-debs/{d.name}" for d in debs))
    # The GPUs the replay shows are fabric-attached: the provider runs Fabric Manager.
    host_pool.run(test_host, "systemctl enable --now nvidia-fabricmanager.service")
    open_standin_record(host_pool, test_host)
    return test_host


@pytest.fixture(scope="module")
def provider_inventory(tmp_path_factory, provider_host, site_data):
    data = {**site_data, "sglang_host": provider_host.address, "cuda_version": "13.0"}
    return write_inventory(
        tmp_path_factory.mktemp("provider-inventory") / "provider.py",
        {"gpu_hosts": [(provider_host.address, data)]},
    )


def nvidia_packages(host_pool, test_host) -> dict[str, str]:
    out = host_pool.run(
        test_host, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'"
    ).stdout
    return {
        name: version
        for name, version, status in (line.split(" ", 2) for line in out.splitlines())
        if status.startswith("ii") and "nvidia" in name
    }


def test_managed_mode_refuses_the_archive_driver_before_any_change(
    host_pool, provider_host, provider_inventory
):
    before = host_pool.run(provider_host, "dpkg-query -W").stdout
    refused = apply(provider_inventory)
    assert refused.returncode != 0 and not refused.executed, refused.describe()
    assert refused.logged_changes() == []
    for line in (
        f"host {provider_host.address}: nvidia_driver_source = 'managed' would install "
        "NVIDIA's driver packages over NVIDIA software another installer put there:",
        f"package nvidia-driver-580-server {ubuntu_archive.VERSION} (a name only Ubuntu's "
        "archive ships)",
        f"package nvidia-utils-580-server {ubuntu_archive.VERSION}",
        'use the driver as it is: nvidia_driver_source = "host"',
        "switch to NVIDIA's packages: nvidia_driver_remove_foreign = true",
        "Nothing was changed.",
    ):
        assert line in refused.stderr, refused.describe()
    assert host_pool.run(provider_host, "dpkg-query -W").stdout == before
    assert host_pool.run(provider_host, f"test -e {NVIDIA_LIST}", check=False).returncode == 1


def test_host_mode_serves_on_the_hosts_own_driver_then_changes_nothing(
    host_pool, provider_host, provider_inventory, tmp_path
):
    held = nvidia_packages(host_pool, provider_host)
    assert set(ubuntu_archive.NAMES) <= set(held)
    first = apply(provider_inventory, options=(*HOST_MODE, "-v"))
    assert first.returncode == 0 and not first.errors(), first.describe()
    changed = first.changed(provider_host.address)
    assert not [
        op
        for op in changed
        if op.startswith(("NVIDIA repository |", "NVIDIA driver |", "CUDA Toolkit |"))
    ], changed
    # What the driver role read and kept, in its noop reason.
    assert (
        "driver 580.159.04 (flavor unknown) from the distribution's archive "
        f"(nvidia-utils-580-server {ubuntu_archive.VERSION})" in first.stderr
    ), first.describe()
    assert "CUDA toolkits found: CUDA 13.0 at /usr/local/cuda-13.0/bin/nvcc" in first.stderr
    assert nvidia_packages(host_pool, provider_host) == held  # no pin, nothing moved
    assert host_pool.run(provider_host, f"test -e {NVIDIA_LIST}", check=False).returncode == 1
    assert host_pool.run(provider_host, "systemctl is-active sglang").stdout.strip() == "active"

    again = apply(provider_inventory, options=HOST_MODE)
    assert again.returncode == 0 and not again.errors(), again.describe()
    again.assert_unchanged()

    # The audit takes the host's driver as the expected one and never says to converge it.
    report_dir = tmp_path / "audit"
    apply(
        provider_inventory,
        "deploy/audit.py",
        options=(*HOST_MODE, "--data", f"audit_report_dir={report_dir}"),
    )
    found = findings(report_dir, provider_host.address)
    [driver] = found["driver"]
    assert driver["level"] == "ok" and "the host's own" in driver["message"], driver
    assert "driver-drift" not in found and "cuda-drift" not in found, found.keys()
    messages = [f["message"] for code in found for f in found[code] if code.startswith("driver")]
    assert not [m for m in messages if "deploy/site.py" in m], messages


def test_the_switch_purges_the_archive_driver_for_nvidias_then_changes_nothing(
    host_pool, provider_host, provider_inventory
):
    dry = apply(provider_inventory, options=SWITCH, dry=True)
    assert dry.returncode == 0, dry.describe()
    planned = [op["name"] for op in dry.report["plan"] if op["hosts_with_change"]]
    assert (
        "NVIDIA driver | Install the compute driver (open modules), removing "
        "libnvidia-compute-580-server, nvidia-driver-580-server, nvidia-fabricmanager-580, "
        "nvidia-kernel-common-580-server, nvidia-utils-580-server" in planned
    ), planned

    switched = apply(provider_inventory, options=SWITCH)
    assert switched.returncode == 0 and not switched.errors(), switched.describe()
    held = nvidia_packages(host_pool, provider_host)
    assert not set(ubuntu_archive.NAMES) & set(held), held
    assert held["nvidia-driver-cuda"].startswith("590."), held
    again = apply(provider_inventory, options=SWITCH)
    again.assert_unchanged()
    # Nothing of the archive's is left: managed mode without the switch is content now.
    plain = apply(provider_inventory)
    plain.assert_unchanged()
