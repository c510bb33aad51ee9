"""NVIDIA Fabric Manager on real Debian 12 test hosts: installed by deploy/site.py at the
driver's release, moved with the driver, judged by the audit; nothing on a PCIe board; the
host's own driver refused while its Fabric Manager is down.

The hosts are systemd-nspawn containers and nvidia-smi replays the 2x H200 capture, whose
GPUs are fabric-attached (Fabric State Completed): in a container that is "Fabric Manager
runs here", as in NVIDIA's driver container. The stand-in repository ships
nvidia-fabricmanager at every driver release (tests/hosts/aptrepo.py)."""

from __future__ import annotations

import pytest

from tests.hosts.apply import apply
from tests.hosts.audit_report import assert_audit_changed_nothing, findings
from tests.integration.test_site_nvidia import versions

pytestmark = pytest.mark.hosts

FM = "nvidia-fabricmanager"
UNIT = "nvidia-fabricmanager.service"
DRIVER = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
DEPLOY = "tests/hosts/deploys/fabric_manager.py"
INSTALL = "NVIDIA Fabric Manager | Install Fabric Manager at the driver's release"
RESTART = "NVIDIA Fabric Manager | Restart Fabric Manager after it changed"
START = "NVIDIA Fabric Manager | Enable and start Fabric Manager"


def unit_state(host_pool, h) -> list[str]:
    return host_pool.run(
        h, f"systemctl is-enabled {UNIT}; systemctl is-active {UNIT}", check=False
    ).stdout.split()


def audit(inventory, tmp_path, name: str) -> dict:
    reports = tmp_path / name
    audited = apply(inventory, "deploy/audit.py", options=("--data", f"audit_report_dir={reports}"))
    assert_audit_changed_nothing(audited, reports)
    return {"run": audited, "dir": reports}


def fabric_finding(reports, h) -> dict:
    [finding] = findings(reports, h.address)["fabric-manager"]
    return finding


def test_fabric_manager_runs_at_the_drivers_release_then_nothing_changes(
    host_pool, hosts, inventory, site_first_apply, tmp_path
):
    first = site_first_apply
    for h in hosts:
        assert INSTALL in first.changed(h.address), first.describe()
        assert START in first.changed(h.address)
        assert versions(host_pool, h, [FM, *DRIVER]) == dict.fromkeys([FM, *DRIVER], "590.48.01-1")
        assert unit_state(host_pool, h) == ["enabled", "active"]
        # The stand-in daemon is what the unit runs.
        assert "nv-fabricmanager" in host_pool.run(h, f"systemctl show -p ExecStart {UNIT}").stdout
    # NVLink 4 (Hopper): no NVLink Subnet Manager.
    assert "no NVLink 5 fabric here: no NVLink Subnet Manager" in first.stderr
    again = apply(inventory)
    again.assert_unchanged()

    reports = audit(inventory, tmp_path, "audit")["dir"]
    for h in hosts:
        finding = fabric_finding(reports, h)
        assert finding["level"] == "ok", finding
        assert "590.48.01-1 runs at the driver's release (590.48.01)" in finding["message"]
        [cuda] = findings(reports, h.address)["cuda-init"]
        # The test hosts have no real libcuda: the probe says so instead of failing.
        assert cuda["level"] == "ok" and cuda["message"].startswith("not probed: "), cuda


def test_a_branch_move_moves_fabric_manager(host_pool, hosts, inventory):
    try:
        moved = apply(inventory, options=("--data", "nvidia_driver_branch=595"))
        assert moved.returncode == 0 and not moved.errors(), moved.describe()
        for h in hosts:
            assert {INSTALL, RESTART} <= set(moved.changed(h.address)), moved.describe()
            assert versions(host_pool, h, [FM, *DRIVER]) == dict.fromkeys(
                [FM, *DRIVER], "595.58.03-1"
            )
            assert unit_state(host_pool, h) == ["enabled", "active"]
        again = apply(inventory, options=("--data", "nvidia_driver_branch=595"))
        again.assert_unchanged()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    for h in hosts:
        assert versions(host_pool, h, [FM, *DRIVER]) == dict.fromkeys([FM, *DRIVER], "590.48.01-1")


def test_the_audit_fails_fabric_manager_stopped_or_at_another_release(
    host_pool, hosts, inventory, tmp_path
):
    stopped, other = hosts
    host_pool.run(stopped, f"systemctl stop {UNIT}")
    host_pool.run(
        other,
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades {FM}=590.44.01-1"
        f" && systemctl restart {UNIT}",
    )
    try:
        run = audit(inventory, tmp_path, "broken")
        assert run["run"].returncode != 0
        down = fabric_finding(run["dir"], stopped)
        assert down["level"] == "fail" and f"{UNIT} is inactive" in down["message"], down
        mismatched = fabric_finding(run["dir"], other)
        assert mismatched["level"] == "fail"
        assert f"{FM} is 590.44.01, the driver is 590.48.01" in mismatched["message"]
        # The next apply puts both right: the release moved back, the service started.
        fixed = apply(inventory)
        assert fixed.returncode == 0 and not fixed.errors(), fixed.describe()
        assert INSTALL in fixed.changed(other.address)
        assert START in fixed.changed(stopped.address)
        assert INSTALL not in fixed.changed(stopped.address)
    finally:
        host_pool.run(stopped, f"systemctl start {UNIT}")
    reports = audit(inventory, tmp_path, "fixed")["dir"]
    for h in hosts:
        assert fabric_finding(reports, h)["level"] == "ok"


def test_a_pcie_board_gets_no_fabric_manager_and_a_waiting_fabric_fails(
    host_pool, hosts, inventory, tmp_path
):
    pcie, hgx = hosts
    host_pool.run(
        pcie,
        "mkdir -p /etc/nvidia-smi-replay "
        "&& echo rtxpro6000x8-pcie-from-smiq > /etc/nvidia-smi-replay/capture",
    )
    host_pool.run(
        hgx,
        "mkdir -p /etc/nvidia-smi-replay "
        "&& echo h200x8-hgx-fabric-in-progress > /etc/nvidia-smi-replay/capture",
    )
    try:
        applied = apply(inventory, DEPLOY, options=("-v",))
        applied.assert_unchanged()
        assert (
            "no Fabric Manager here: no NVSwitch and no fabric-attached GPU (Fabric State N/A)"
            in applied.stderr
        )
        assert "(State In Progress) in a container (systemd-nspawn): FM runs here" in (
            applied.stderr
        )
        reports = audit(inventory, tmp_path, "boards")["dir"]
        board = fabric_finding(reports, pcie)
        assert board["level"] == "ok" and board["message"].startswith("no NVSwitch fabric")
        waiting = fabric_finding(reports, hgx)
        assert waiting["level"] == "fail"
        assert "GPU 7: State In Progress, Status N/A" in waiting["message"]
    finally:
        for h in hosts:
            host_pool.run(h, "rm -f /etc/nvidia-smi-replay/capture")


def test_the_hosts_own_driver_with_fabric_manager_down_is_refused_before_any_change(
    host_pool, hosts, inventory
):
    down, up = hosts
    host_pool.run(down, f"systemctl stop {UNIT}")
    before = {h.address: host_pool.run(h, "dpkg-query -W").stdout for h in hosts}
    try:
        refused = apply(inventory, DEPLOY, options=("--data", "nvidia_driver_source=host"))
        assert refused.returncode != 0 and not refused.executed, refused.describe()
        assert refused.logged_changes() == []
        assert (
            f"host {down.address}: nvidia_driver_source = 'host' and this host needs NVIDIA "
            "Fabric Manager (the GPUs are fabric-attached (State Completed) in a container "
            f"(systemd-nspawn): FM runs here), but {UNIT} is inactive." in refused.stderr
        ), refused.describe()
        assert "Nothing was changed." in refused.stderr
        assert f"host {up.address}: nvidia_driver_source" not in refused.stderr
        assert {h.address: host_pool.run(h, "dpkg-query -W").stdout for h in hosts} == before
        assert unit_state(host_pool, down) == ["enabled", "inactive"]
    finally:
        host_pool.run(down, f"systemctl start {UNIT}")
    # Running again, the host's own Fabric Manager is taken as it is: nothing changes.
    taken = apply(inventory, DEPLOY, options=("--data", "nvidia_driver_source=host"))
    taken.assert_unchanged()
