"""nvidia_dcgm_install on real Debian 12 test hosts (roles/dcgm.py): DCGM 4 for the CUDA major
of cuda_version from the stand-in NVIDIA repository (tests/hosts/aptrepo.py dcgm_packages:
real names, a dcgmi that replays a real `dcgmi diag` table), its nvidia-dcgm service running;
a second apply changes nothing; the audit's dcgm-diag reads what dcgmi printed."""

from __future__ import annotations

import pytest

from tests.hosts.apply import apply
from tests.hosts.audit_report import findings

pytestmark = pytest.mark.hosts

SWITCH = ("--data", "nvidia_dcgm_install=True")
PACKAGE = "datacenter-gpu-manager-4-cuda13"  # the site's cuda_version is 13.1


def test_dcgm_is_installed_running_judged_then_nothing_changes(
    host_pool, hosts, inventory, tmp_path
):
    try:
        first = apply(inventory, options=SWITCH)
        assert first.returncode == 0 and not first.errors(), first.describe()
        for h in hosts:
            changed = first.changed(h.address)
            assert f"DCGM | Install DCGM ({PACKAGE})" in changed, changed
            assert [op for op in changed if not op.startswith("DCGM |")] == [], changed
            status = host_pool.run(h, f"dpkg-query -W -f '${{Status}}' {PACKAGE}").stdout
            assert status == "install ok installed"
            active = host_pool.run(h, "systemctl is-active nvidia-dcgm").stdout.strip()
            assert active == "active"
        again = apply(inventory, options=SWITCH)
        again.assert_unchanged()

        report_dir = tmp_path / "audit"
        apply(
            inventory,
            "deploy/audit.py",
            options=(*SWITCH, "--data", f"audit_report_dir={report_dir}"),
        )
        for h in hosts:
            [diag] = findings(report_dir, h.address)["dcgm-diag"]
            assert diag["level"] == "ok", diag
            # The replayed table: DCGM 4.2.3, its one test (Software) passed.
            assert diag["message"] == "dcgmi diag -r 1: exit 0, 1 test(s) passed (DCGM 4.2.3).", (
                diag
            )
    finally:
        for h in hosts:
            host_pool.run(
                h,
                "systemctl disable --now nvidia-dcgm 2>/dev/null; "
                f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {PACKAGE} >/dev/null; "
                "systemctl daemon-reload",
                check=False,
            )
