"""deploy/audit.py on real Debian 12 test hosts: it reads everything, changes nothing, writes
a JSON report per host, and exits non-zero when a finding fails."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from tests.hosts.apply import apply, write_inventory
from tests.hosts.audit_report import assert_audit_changed_nothing, findings, levels

pytestmark = pytest.mark.hosts

AUDIT = "deploy/audit.py"
CAPTURE_CHOICE = "/etc/nvidia-smi-replay/capture"
API_KEY = "sk-site-APIKEY-0123456789"


def audit(inventory, report_dir: Path, *options: str):
    result = apply(inventory, AUDIT, options=("--data", f"audit_report_dir={report_dir}", *options))
    # A check never changes a host, and exits 1 exactly when a report says why.
    assert_audit_changed_nothing(result, report_dir)
    return result


def test_audit_of_served_hosts_changes_nothing_and_fails_on_driver_drift(
    host_pool, hosts, inventory, tmp_path
):
    result = audit(inventory, tmp_path)
    # The replayed H200 capture runs driver 580 and the inventory wants branch 590.
    assert result.returncode != 0, result.describe()
    assert "audit failed: driver-drift" in result.stderr
    # Every host failing its audit is a finding, not a crash of the run.
    assert "No hosts remaining" not in result.stderr and "executed 0 commands" not in result.stderr
    for h in hosts:
        assert f"[{h.address}] failed: audit failed: driver-drift" in result.stderr
        by_code = findings(tmp_path, h.address)
        assert levels(by_code, "fail") == {"driver-drift"}, by_code
        assert {
            "cuda",
            "gpu-count",
            "persistence-mode",
            "topology",
            "p2p",
            "sglang-version",
            "service",
            "unit",
            "pcie-links",
            "decode-sanity",
        } <= levels(by_code, "ok"), by_code
        [decode] = by_code["decode-sanity"]
        assert "'Paris'" in decode["message"] and decode["evidence"]["completion_tokens"] > 0
        [links] = by_code["pcie-links"]
        assert links["evidence"] == {"read": "under load", "load": "decode"}
        report = json.loads((tmp_path / f"{h.address}.json").read_text())
        assert report["facts"]["topology"] == {
            "matrix": {
                "GPU0": {"GPU0": "X", "GPU1": "NV18"},
                "GPU1": {"GPU0": "NV18", "GPU1": "X"},
            },
            "nvlink": True,
        }
        assert report["facts"]["load"]["samples"] >= 1
        # ACS above the GPUs (PcieAcs) as the host itself reports it: whether lspci is there,
        # and which PCI devices are NVIDIA's (none on the test VM's bus: nvidia-smi is a replay).
        acs = report["record"]["facts"]["pcie_acs"]
        lspci = host_pool.run(h, "command -v lspci", check=False).returncode == 0
        nvidia = host_pool.run(
            h, "grep -l 0x10de /sys/bus/pci/devices/*/vendor 2>/dev/null", check=False
        ).stdout.split()
        assert (acs["lspci"], sorted(acs["gpus"])) == (
            lspci,
            sorted(p.split("/")[-2] for p in nvidia),
        )
        # The test hosts are containers in a VM: ACS is not judged there.
        assert not {"pcie-acs", "pcie-acs-redirect", "pcie-acs-unknown"} & set(by_code), by_code
        # No plain digest of a file that holds a secret: a weak key would fall to a word list.
        config_digest = host_pool.run(h, "sha256sum /etc/sglang/sglang.yaml").stdout.split()[0]
        assert config_digest not in json.dumps(report)
        assert f"audit of {h.address}: FAIL" in result.stderr
    # The decode check read the API key on the host; it never reached the controller's output.
    assert API_KEY not in result.stderr + result.stdout
    assert API_KEY not in "".join(p.read_text() for p in tmp_path.glob("*.json"))


def test_a_hand_edited_unit_is_unit_drift(host_pool, hosts, inventory, tmp_path):
    edited = hosts[0]
    unit = "/etc/systemd/system/sglang.service"
    host_pool.run(
        edited, f"cp -p {unit} /root/unit.keep && sed -i 's/^Restart=.*/Restart=no/' {unit}"
    )
    try:
        audit(inventory, tmp_path)
        [drift] = findings(tmp_path, edited.address)["unit-drift"]
        assert drift["level"] == "fail" and drift["evidence"]["changed"] == [unit]
        assert "unit-drift" not in findings(tmp_path, hosts[1].address)
    finally:
        host_pool.run(edited, f"mv -f /root/unit.keep {unit}")


def test_a_link_at_x8_of_x16_fails_that_gpu(host_pool, hosts, inventory, tmp_path):
    # The second host now replays an 8x RTX PRO 6000 box whose GPU 5 trained to x8.
    degraded = hosts[1]
    host_pool.run(
        degraded,
        f"mkdir -p {CAPTURE_CHOICE.rsplit('/', 1)[0]} "
        f"&& echo rtxpro6000x8-pcie-x8-of-x16 > {CAPTURE_CHOICE}",
    )
    try:
        result = audit(
            inventory,
            tmp_path,
            "--limit",
            degraded.address,
            "--data",
            "nvidia_driver_branch=595",
            "--data",
            "expected_gpu_count=8",
        )
        assert result.returncode != 0, result.describe()
        by_code = findings(tmp_path, degraded.address)
        assert [(f["gpu"], f["level"]) for f in by_code["pcie-width-degraded"]] == [(5, "fail")]
        assert "x8 of x16" in by_code["pcie-width-degraded"][0]["message"]
        # Replayed readings stay at Gen1 while the decode prompt runs: judged under load.
        assert {(f["level"], f["evidence"]["read"]) for f in by_code["pcie-gen-below-max"]} == {
            ("fail", "under load")
        }
        assert len(by_code["pcie-gen-below-max"]) == 8
        assert {
            "topology-pcie-only",
            "topology-cross-numa",
            "p2p-unavailable",
            "driver-reboot-required",
        } <= levels(by_code, "warn"), by_code
        # The service still runs the 2-GPU configuration: the inventory now renders TP 8.
        assert "unit-drift" in levels(by_code, "fail")
        assert "gpu-count" in levels(by_code, "ok") and "driver-drift" not in by_code
        assert not (tmp_path / f"{hosts[0].address}.json").exists()
    finally:
        host_pool.run(degraded, f"rm -f {CAPTURE_CHOICE}")


def test_a_bare_host_without_a_driver_gets_findings_not_a_traceback(host_pool, tmp_path):
    from tests.hosts.apply import write_inventory

    [bare] = host_pool.boot(1)
    inventory = write_inventory(
        tmp_path / "bare.py", {"bare": [(bare.address, host_pool.inventory_data())]}
    )
    result = audit(inventory, tmp_path / "reports")
    assert result.returncode != 0, result.describe()
    assert "Traceback" not in result.stderr
    by_code = findings(tmp_path / "reports", bare.address)
    # The test machine has no NVIDIA device on its PCI bus, so neither has the bare host: it
    # is a machine without a GPU, told so in one finding (a GPU host without a driver gets
    # driver-missing: tests/unit/test_audit_judge.py).
    assert levels(by_code, "fail") == {"no-nvidia-gpu"} and len(by_code) == 1
    [no_gpu] = by_code["no-nvidia-gpu"]
    assert "Skipped:" in no_gpu["message"] and "topology" in no_gpu["message"]


def test_a_configured_router_that_is_not_there_is_found(hosts, inventory, tmp_path):
    first = hosts[0]
    workers = json.dumps([f"http://{h.address}:30000" for h in hosts])
    result = audit(
        inventory,
        tmp_path,
        "--limit",
        first.address,
        "--data",
        f"sglang_router_worker_urls={workers}",
    )
    assert result.returncode != 0, result.describe()
    by_code = findings(tmp_path, first.address)
    down = [f["message"] for f in by_code["service-down"]]
    # The remediation names the inventory this audit was started with, ready to paste.
    assert down == [
        "sglang-router.service is not installed. "
        f"Deploy it with `pyinfra {inventory} deploy/site.py`."
    ]
    [drift] = by_code["unit-drift"]
    assert drift["evidence"]["missing"] == ["/etc/systemd/system/sglang-router.service"]
    assert "service" in levels(by_code, "ok")  # SGLang itself still serves


UNREACHABLE = "127.0.0.250"  # on loopback, where no test host listens


def test_an_unreachable_host_gets_its_line_and_report_and_fails_the_run(hosts, inventory, tmp_path):
    served = hosts[0]
    [(name, data), *_] = runpy.run_path(str(inventory))["gpu_hosts"]
    assert name == served.address
    two = write_inventory(
        tmp_path / "two.py",
        {"gpu_hosts": [(name, data), (UNREACHABLE, {**data, "sglang_host": UNREACHABLE})]},
    )
    result = audit(two, tmp_path / "reports")
    assert result.returncode != 0, result.describe()
    # After pyinfra's own output: one line a host, the reachable one with its finding.
    summary = result.stderr[result.stderr.index("--> Summary, one line a host:") :]
    assert f"[{served.address}] failed: audit failed: driver-drift" in summary
    assert f"[{UNREACHABLE}] unreachable: Could not connect" in summary, result.describe()
    assert levels(findings(tmp_path / "reports", served.address), "fail") == {"driver-drift"}
    report = json.loads((tmp_path / "reports" / f"{UNREACHABLE}.json").read_text())
    assert report["status"] == report["result"] == "unreachable"
    assert report["error"].startswith("Could not connect") and report["findings"] == []
