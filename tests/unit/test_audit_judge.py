"""The audit's record and judge: facts read from the real 2x H200 machine, judged without a
host; the report's shape (``facts.driver.loaded`` is the loaded kernel module); a report's
record judged again gives the same report; and the audit operation's reading, run against
fact outputs, fills the record."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from checks.facts import NvidiaGpus, NvidiaLoadedModule, NvidiaP2P, NvidiaTopology
from pyinfra_sglang.audit.judge import audit_report, facts_summary, judge
from pyinfra_sglang.audit.record import (
    AuditExpectations,
    AuditFacts,
    GpuLoadReading,
    UnitFiles,
    record_from_document,
)
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from tests.unit.captures import captured_lines

AUDIT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
CAPTURE = "h200x2-nvlink-vm"
QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"


def h200_facts(**changes) -> AuditFacts:
    """The 2x H200 VM as the audit read it: driver 580 loaded, no CUDA 13.1, no SGLang."""
    gpus = NvidiaGpus().process(captured_lines(CAPTURE, QUERY))
    values = dict(
        gpus=gpus,
        loaded_module=NvidiaLoadedModule().process(
            captured_lines(CAPTURE, "cat /proc/driver/nvidia/version")
        ),
        installed_module=None,
        reboot_required=False,
        nvcc=None,
        virtualization={"container": "unknown", "vm": "hypervisor"},
        topology=NvidiaTopology().process(captured_lines(CAPTURE, "nvidia-smi topo -m")),
        p2p=NvidiaP2P().process(captured_lines(CAPTURE, "nvidia-smi topo -p2p r")),
        iommu={"cmdline": {}, "active": False},
        persistenced={"LoadState": "loaded", "ActiveState": "active", "SubState": "running"},
        service={"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"},
        router_service=None,
        sglang_version=None,
        unit_files=None,
        load=GpuLoadReading(kind="copy", samples=[gpus], probe={"gpus": []}),
    )
    values.update(changes)
    return AuditFacts(**values)


def expectations(**changes) -> AuditExpectations:
    config = HostConfig(**changes)
    return AuditExpectations.from_config(config, "sglang.service", node_rank=0)


def codes(findings, level=None) -> list[str]:
    return sorted({f.code for f in findings if level is None or f.level == level})


def test_the_h200_vm_against_the_default_inventory():
    findings = judge(expectations(), h200_facts())
    assert codes(findings, "fail") == [
        "cuda-drift",
        "driver-drift",
        "service-down",
        "sglang-version-drift",
    ]
    assert {"pcie-links", "topology", "p2p", "persistence-mode"} <= set(codes(findings, "ok"))


def test_report_facts_driver_loaded_is_the_kernel_module():
    facts = h200_facts()
    driver = facts_summary(facts)["driver"]
    assert driver == {
        "loaded": {"version": "580.159.04", "flavor": "open"},
        "installed": None,
        "userspace": "580.159.04",
        "nvidia_smi_package": None,  # not read when this VM was recorded
    }


def test_report_shape():
    facts = h200_facts()
    expected = expectations()
    document = audit_report("gpu-1", expected, facts, judge(expected, facts))
    assert sorted(document) == ["facts", "findings", "host", "record", "result", "summary"]
    assert sorted(document["facts"]) == [
        "cuda",
        "decode",
        "driver",
        "gpus",
        "iommu",
        "load",
        "p2p",
        "service",
        "sglang_version",
        "topology",
        "virtualization",
    ]
    assert document["facts"]["load"] == {"kind": "copy", "samples": 1, "result": {"gpus": []}}
    assert sorted(document["record"]) == ["expectations", "facts"]
    assert document["result"] == "fail" and document["host"] == "gpu-1"


def test_a_record_judged_again_gives_the_same_report():
    facts = h200_facts(
        unit_files=UnitFiles(expected={"/etc/a": "1", "/etc/b": "2"}, current={"/etc/a": "1"}),
        service={"LoadState": "loaded", "ActiveState": "active", "SubState": "running"},
    )
    expected = expectations(sglang_router_worker_urls=["http://10.0.0.2:30000"])
    document = audit_report("gpu-1", expected, facts, judge(expected, facts))
    stored = json.loads(json.dumps(document))
    again_expected, again_facts = record_from_document(stored["record"])
    assert (again_expected, again_facts) == (expected, facts)
    again = audit_report("gpu-1", again_expected, again_facts, judge(again_expected, again_facts))
    assert json.loads(json.dumps(again)) == stored
    # The router is judged (not found here) and the missing file named.
    assert "unit-drift" in codes(judge(expected, facts), "fail")
    assert any(f.message.startswith("sglang-router.service") for f in judge(expected, facts))


def test_a_failed_link_probe_is_reported():
    facts = h200_facts(load=GpuLoadReading(probe_failure="exit 1: CUDA out of memory"))
    found = [f for f in judge(expectations(), facts) if f.code == "link-probe-failed"]
    assert len(found) == 1 and "CUDA out of memory" in found[0].message


def test_a_stopped_service_skips_the_decode_prompt_with_the_reason():
    facts = h200_facts(
        service={"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"}
    )
    [decode] = [f for f in judge(expectations(), facts) if f.code == "decode-sanity"]
    assert decode.level == "warn" and "sglang.service is not running" in decode.message


def test_a_machine_without_an_nvidia_gpu_says_so_in_one_finding_listing_what_it_skipped():
    # A container or a laptop: nothing on the PCI bus, no module, nvidia-smi finds nothing.
    # Telling it to install the driver and reboot would mislead.
    facts = h200_facts(
        gpus=[], loaded_module=None, topology={}, p2p={}, nvidia_pci_devices=0, nvcc=None
    )
    [finding] = judge(expectations(), facts)
    assert (finding.level, finding.code) == ("fail", "no-nvidia-gpu")
    assert finding.message.startswith("No NVIDIA GPU on this machine's PCI bus")
    assert "Skipped: NVIDIA driver and its branch, DKMS builds" in finding.message
    assert "decode prompt" in finding.evidence["skipped"]
    # A GPU on the bus without a driver is the driver's finding, as before.
    with_gpu = codes(judge(expectations(), dataclasses.replace(facts, nvidia_pci_devices=8)))
    assert "driver-missing" in with_gpu and "no-nvidia-gpu" not in with_gpu


def test_no_gpu_judges_no_links_and_no_decode():
    facts = h200_facts(gpus=[], loaded_module=None, topology={}, p2p={})
    found = codes(judge(expectations(), facts))
    assert "driver-missing" in found
    assert not {"pcie-links", "decode-sanity", "pcie-gen-below-max"} & set(found)


RECORDED = sorted(AUDIT_FIXTURES.glob("*/report-*.json"))


def test_the_recorded_reports_are_there():
    assert [f"{p.parent.name}/{p.name}" for p in RECORDED] == [
        "h200-host-mode/report-host-mode.json",
        "h200x2-nvlink-vm/report-copy-load.json",
        "h200x2-nvlink-vm/report-default.json",
        "h200x2-nvlink-vm/report-link-probe.json",
    ]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_real_reports_judge_again_to_the_same_report(path):
    """Reports written by the audit on real hardware, with the record they were judged
    from: today's judge must give the whole report again (findings, facts, summary)."""
    stored = json.loads(path.read_text())
    expected, facts = record_from_document(stored["record"])
    again = audit_report(stored["host"], expected, facts, judge(expected, facts))
    # Recorded before the audit read DKMS's state: the record now says it was not read.
    stored["record"]["facts"].setdefault("dkms", None)
    stored["record"]["facts"].setdefault("module_candidate", None)
    stored["record"]["facts"].setdefault("secure_boot", None)
    stored["record"]["facts"].setdefault("nvidia_smi_package", None)
    stored["record"]["facts"].setdefault("model", None)
    stored["facts"]["driver"].setdefault("nvidia_smi_package", None)
    stored["record"]["expectations"].setdefault("update_within_branch", False)
    # Recorded before the audit read flash-attn: not read, so not judged.
    stored["record"]["facts"].setdefault("flash_attn", None)
    stored["record"]["expectations"].setdefault("flash_attn_version", None)
    stored["record"]["expectations"].setdefault("flash_attn_cuda_archs", None)
    # Recorded before flash_attn_build: the build was on.
    stored["record"]["expectations"].setdefault("flash_attn_build", True)
    # Recorded before the audit counted the NVIDIA devices on the PCI bus: not read.
    stored["record"]["facts"].setdefault("nvidia_pci_devices", None)
    # Recorded before the inventory named the GPU model: not compared.
    stored["record"]["expectations"].setdefault("expected_gpu_model", None)
    # Recorded before the audit read ACS above the GPUs and the sglang_env P2P keys.
    stored["record"]["facts"].setdefault("pcie_acs", None)
    stored["record"]["expectations"].setdefault("nccl_p2p_env", {})
    # Recorded before the audit dated its records (driver support and the driver against the
    # toolkit are judged on dated ones) and before nvidia_driver_version.
    stored["record"]["facts"].setdefault("audited_on", None)
    stored["record"]["expectations"].setdefault("driver_version", None)
    # Recorded before nvidia_driver_source: the deploy managed the driver.
    stored["record"]["expectations"].setdefault("driver_source", "managed")
    # Recorded since remediations name the inventory the audit ran with; the judge's own
    # words say INVENTORY (run_summary.with_inventory puts the name in).
    for finding in stored["findings"]:
        finding["message"] = finding["message"].replace("pyinfra @local ", "pyinfra INVENTORY ")
    # Recorded before the audit read the NVSwitch fabric, Fabric Manager and cuInit.
    for key in ("fabric", "fabric_manager_service", "fabric_manager_package", "cuda_init"):
        stored["record"]["facts"].setdefault(key, None)
    # Recorded before the audit read the GPUs' health (Xids, ECC, row remapping, NVLink
    # counters, clock event reasons under load).
    for key in ("kernel_xids", "memory_health", "nvlink_errors", "dcgm_diag"):
        stored["record"]["facts"].setdefault(key, None)
    stored["record"]["facts"]["load"].setdefault("clock_reasons", [])
    # Recorded before the watchdog (sglang_watchdog): off, and not read.
    stored["record"]["expectations"].setdefault("watchdog", False)
    # Recorded before monitoring (monitoring_role): no monitoring server, not read.
    stored["record"]["expectations"].setdefault("monitoring_url", None)
    stored["record"]["facts"].setdefault("monitoring", None)
    stored["record"]["facts"].setdefault("watchdog", None)
    # Recorded before flash-attn by need: no reason for a build that was off.
    stored["record"]["expectations"].setdefault("flash_attn_off_reason", None)
    # Recorded before the audit read a multi-node member's group network.
    stored["record"]["facts"].setdefault("group_network", None)
    assert json.loads(json.dumps(again)) == stored


# -- DKMS builds for the kernel that boots next ------------------------------------------------


def test_dkms_state_is_read_in_both_of_dkms_formats():
    from pyinfra_sglang.parsers.system import parse_dkms_state

    state = parse_dkms_state(
        [
            "kernel 6.1.0-9-amd64",
            "kernel 6.1.0-28-amd64",
            # dkms 3, as captured (tests/fixtures/nvidia-repo/debian-dpkg-l-595.45.04.txt)
            "nvidia/595.45.04, 6.18.15+deb14-amd64, x86_64: installed",
            "nvidia/595.45.04, 6.1.0-9-amd64, x86_64: installed",
            "nvidia, 590.48.01, 6.1.0-28-amd64, x86_64: built",  # dkms 2, not installed
        ]
    )
    assert state["kernels"] == ["6.1.0-9-amd64", "6.1.0-28-amd64"]  # 28 after 9
    assert state["built"] == {
        "6.18.15+deb14-amd64": ["595.45.04"],
        "6.1.0-9-amd64": ["595.45.04"],
    }


def test_the_kernel_that_boots_next_without_the_module_is_a_warning():
    from pyinfra_sglang.audit.drift import findings_for_dkms

    state = {"kernels": ["6.1.0-9-amd64", "6.1.0-28-amd64"], "built": {"6.1.0-9-amd64": ["1"]}}
    [missing] = findings_for_dkms(state, "1")
    assert (missing.level, missing.code) == ("warn", "dkms-module-missing")
    assert "Kernel 6.1.0-28-amd64" in missing.message and "dkms autoinstall" in missing.message
    built = {**state, "built": {"6.1.0-28-amd64": ["1"]}}
    assert [f.code for f in findings_for_dkms(built, "1")] == ["dkms-module"]
    # A module of another version does not count; no kernels (a container) or no driver: silent.
    assert [f.code for f in findings_for_dkms(built, "2")] == ["dkms-module-missing"]
    assert findings_for_dkms({"kernels": [], "built": {}}, "1") == []
    assert findings_for_dkms(state, None) == [] and findings_for_dkms(None, "1") == []


def test_a_newer_release_of_the_branch_is_a_warning_naming_the_setting():
    from pyinfra_sglang.audit.drift import findings_for_driver_update

    [found] = findings_for_driver_update(590, "590.44.01", "590.48.01", updating=False)
    assert (found.level, found.code) == ("warn", "driver-update-available")
    assert "590.48.01 on branch 590; 590.44.01 is installed" in found.message
    assert "nvidia_driver_update_within_branch: true" in found.message
    # The same release, another branch's (the pin would not take it), or nothing: silent.
    assert findings_for_driver_update(590, "590.48.01", "590.48.01", updating=False) == []
    assert findings_for_driver_update(590, "590.48.01", "595.58.03", updating=False) == []
    assert findings_for_driver_update(590, "590.48.01", "590.44.01", updating=False) == []
    assert findings_for_driver_update(590, None, "590.48.01", updating=False) == []


def test_an_unsigned_module_under_secure_boot_fails():
    from pyinfra_sglang.audit.drift import findings_for_secure_boot

    on = {"enabled": True, "source": "mokutil", "module_signer": None}
    [found] = findings_for_secure_boot(on, "590.48.01")
    assert (found.level, found.code) == ("fail", "secure-boot-unsigned-module")
    assert "nvidia_mok_key_file" in found.message
    assert (
        findings_for_secure_boot({**on, "module_signer": "DKMS module signing"}, "590.48.01") == []
    )
    assert findings_for_secure_boot({**on, "enabled": False}, "590.48.01") == []
    assert findings_for_secure_boot(on, None) == [] and findings_for_secure_boot(None, "1") == []


def test_the_models_snapshot_is_judged_there_whole_and_current():
    from pyinfra_sglang.audit.drift import findings_for_model

    commit, other = "a" * 40, "b" * 40
    whole = {
        "name": "org/m",
        "local": False,
        "revision": commit,
        "commit": commit,
        "files": 3,
        "broken": 0,
        "incomplete": 0,
        "hub_commit": None,
    }
    assert [(f.level, f.code) for f in findings_for_model(whole)] == [("ok", "model")]
    [missing] = findings_for_model({**whole, "files": 0})
    assert (missing.level, missing.code) == ("fail", "model-missing")
    assert f"no snapshot of revision {commit}" in missing.message
    [cut] = findings_for_model({**whole, "broken": 1, "incomplete": 1})
    assert (cut.level, cut.code) == ("fail", "model-incomplete")
    moved = {**whole, "revision": "main", "hub_commit": other}
    [drift] = findings_for_model(moved)
    assert (drift.level, drift.code) == ("warn", "model-revision-drift")
    assert f"main is commit {other} on the Hub now; the host has {commit}" in drift.message
    local = findings_for_model({"name": "/models/m", "local": True, "files": 0})
    assert "its local path has no config.json" in local[0].message
    assert findings_for_model(None) == []


def test_a_unit_its_start_limit_stopped_is_named_as_a_crash_loop():
    from pyinfra_sglang.audit.service import findings_for_service

    [found] = findings_for_service(
        "sglang.service",
        {
            "LoadState": "loaded",
            "ActiveState": "failed",
            "SubState": "failed",
            "Result": "start-limit-hit",
            "NRestarts": "2",
        },
    )
    assert (found.level, found.code) == ("fail", "service-down")
    assert "crashed at every start until its start limit stopped it" in found.message


def test_flash_attn_built_for_the_gpus_found_or_a_mismatch_after_an_upgrade():
    rtx = NvidiaGpus().process(captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY))
    built_for_90 = {"installed": "2.8.3", "built_archs": ["90"]}

    def flash_attn(findings):
        return [(f.level, f.code, f.message) for f in findings if f.code.startswith("flash-attn")]

    # The H200s (9.0) with a build for 90: ok.
    assert flash_attn(judge(expectations(), h200_facts(flash_attn=built_for_90))) == [
        ("ok", "flash-attn", "flash-attn 2.8.3 built for 90 (the GPUs' 90).")
    ]
    # The same host after its GPUs became RTX PRO 6000s (12.0): the build has no kernels.
    [(level, code, message)] = flash_attn(
        judge(expectations(), h200_facts(gpus=rtx, flash_attn=built_for_90))
    )
    assert (level, code) == ("fail", "flash-attn-arch-mismatch")
    assert "the installed build has no kernels for 120 (built for 90)" in message
    assert "deploy/site.py" in message
    # Built for them, or no record to tell: ok, and a mismatch.
    rebuilt = {"installed": "2.8.3", "built_archs": ["120"]}
    assert flash_attn(judge(expectations(), h200_facts(gpus=rtx, flash_attn=rebuilt)))[0][:2] == (
        "ok",
        "flash-attn",
    )
    unknown = {"installed": "2.8.3", "built_archs": None}
    assert flash_attn(judge(expectations(), h200_facts(flash_attn=unknown)))[0][:2] == (
        "fail",
        "flash-attn-arch-mismatch",
    )
    # The inventory's list is what counts when set.
    pinned = expectations(flash_attn_cuda_archs=["90", "120"])
    assert flash_attn(judge(pinned, h200_facts(flash_attn=built_for_90)))[0][:2] == (
        "fail",
        "flash-attn-arch-mismatch",
    )
    # An inventory list that lacks the GPUs found: built as asked, still no kernels for them.
    [(level, code, message)] = flash_attn(
        judge(
            expectations(flash_attn_cuda_archs=["90"]),
            h200_facts(gpus=rtx, flash_attn=built_for_90),
        )
    )
    assert (level, code) == ("fail", "flash-attn-arch-mismatch")
    assert "flash_attn_cuda_archs (90), which lacks the GPUs' 120" in message
    # Another version (the next deploy builds the pin) or none installed: nothing to judge,
    # as in records made before flash-attn was read.
    older = {"installed": "2.8.2", "built_archs": ["90"]}
    assert flash_attn(judge(expectations(), h200_facts(gpus=rtx, flash_attn=older))) == []
    assert flash_attn(judge(expectations(), h200_facts())) == []


def test_nvidia_pci_devices_counts_display_and_3d_controllers_only():
    from checks.facts import NvidiaPciDevices

    # /sys/bus/pci/devices/*/class of NVIDIA devices: a 3D controller (H200), a VGA one, and
    # the GPU's audio and NVSwitch-like bridges, which are no GPU.
    lines = ["0x030200", "0x030000", "0x040300", "0x068000"]
    assert NvidiaPciDevices().process(lines) == 2
    assert NvidiaPciDevices().process([]) == 0
