"""The audit's judge: a host's facts against the inventory's expectations -> findings and a
report. Pure: it reads no host, so a recorded report can be judged again."""

from __future__ import annotations

from pyinfra_sglang.audit.bandwidth import findings_for_bandwidth
from pyinfra_sglang.audit.drift import (
    findings_for_cuda,
    findings_for_dkms,
    findings_for_driver,
    findings_for_driver_support,
    findings_for_driver_toolkit,
    findings_for_driver_update,
    findings_for_flash_attn,
    findings_for_gpu_count,
    findings_for_gpu_model,
    findings_for_host_driver,
    findings_for_iommu,
    findings_for_model,
    findings_for_persistence,
    findings_for_secure_boot,
    findings_for_sglang_version,
)
from pyinfra_sglang.audit.fabric import findings_for_cuda_init, findings_for_fabric
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.group_network import findings_for_group_network
from pyinfra_sglang.audit.health import findings_for_dcgm, findings_for_gpu_health
from pyinfra_sglang.audit.links import findings_for_links, pcie_links
from pyinfra_sglang.audit.monitoring import findings_for_monitoring
from pyinfra_sglang.audit.p2p_path import findings_for_acs, findings_for_probe_hang, service_p2p
from pyinfra_sglang.audit.record import (
    AuditExpectations,
    AuditFacts,
    record_document,
)
from pyinfra_sglang.audit.report import report
from pyinfra_sglang.audit.service import (
    findings_for_decode,
    findings_for_service,
    findings_for_unit_drift,
)
from pyinfra_sglang.audit.topology import findings_for_p2p, findings_for_topology, p2p_all_ok
from pyinfra_sglang.audit.watchdog import findings_for_watchdog
from pyinfra_sglang.driver.nvidia import REBOOT_REQUIRED, compute_cap_arch
from pyinfra_sglang.gpu_links.p2p import PeerPath
from pyinfra_sglang.parsers.system import detected_vm
from pyinfra_sglang.parsers.topo import topology_has_nvlink


def unit_installed(facts: AuditFacts) -> bool:
    return facts.service.get("LoadState") not in (None, "not-found")


def serves_here(expectations: AuditExpectations, facts: AuditFacts) -> bool:
    """The service runs and this node answers HTTP: the decode prompt can load the GPUs."""
    return facts.service.get("ActiveState") == "active" and expectations.node_rank == 0


def _driver_findings(expected: AuditExpectations, facts: AuditFacts) -> list[Finding]:
    userspace = facts.gpus[0]["driver_version"] if facts.gpus else None
    if host_source(expected):
        findings = findings_for_host_driver(facts.loaded_module, userspace, len(facts.gpus))
        findings += findings_for_driver_support(
            None, facts.loaded_module, facts.audited_on, host_source=True
        )
        return findings
    findings = findings_for_driver(
        expected.driver_branch,
        expected.kernel_modules,
        facts.loaded_module,
        facts.installed_module,
        userspace,
        len(facts.gpus),
        expected.driver_version,
    )
    findings += findings_for_driver_support(
        expected.driver_branch, facts.loaded_module, facts.audited_on
    )
    reboot_known = any(f.code == "driver-reboot-required" for f in findings)
    if facts.reboot_required and not reboot_known:
        message = f"{REBOOT_REQUIRED} exists: a package update waits for a reboot."
        findings.append(Finding("warn", "driver-reboot-required", message))
    return findings


def host_source(expected: AuditExpectations) -> bool:
    """The host's own driver and toolkits are the expected ones (nvidia_driver_source)."""
    return expected.driver_source == "host"


def _service_findings(expected: AuditExpectations, facts: AuditFacts) -> list[Finding]:
    findings = findings_for_service(expected.unit_name, facts.service)
    if expected.router_unit:
        findings += findings_for_service(expected.router_unit, facts.router_service or {})
    if facts.unit_files is not None:
        if facts.unit_files.problem:
            message = f"cannot render the expected service files: {facts.unit_files.problem}"
            findings.append(Finding("warn", "unit-drift", message))
        else:
            findings += findings_for_unit_drift(facts.unit_files.expected, facts.unit_files.current)
    findings += findings_for_watchdog(expected.watchdog, facts.watchdog)
    findings += findings_for_monitoring(expected.monitoring_url is not None, facts.monitoring)
    return findings


def peer_path(facts: AuditFacts) -> PeerPath:
    """What the host allows for peer traffic, as the deploy reads it (checks/peer_path.py)."""
    return PeerPath(
        p2p=facts.p2p, acs=facts.pcie_acs, iommu=facts.iommu, vm=detected_vm(facts.virtualization)
    )


def _load_findings(expected: AuditExpectations, facts: AuditFacts) -> list[Finding]:
    load = facts.load
    findings = findings_for_links(facts.gpus, load.samples, load.kind)
    if load.kind == "probe" and load.probe:
        findings += findings_for_bandwidth(load.probe, pcie_links(facts.gpus), facts.topology)
    if load.probe:
        state, _ = service_p2p(
            expected.nccl_p2p_env, peer_path(facts), facts.topology, len(facts.gpus)
        )
        findings += findings_for_probe_hang(load.probe.get("peer_hang"), state)
    if load.probe_failure:
        findings.append(
            Finding(
                "warn",
                "link-probe-failed",
                f"the link bandwidth probe failed ({load.probe_failure}); links were not "
                "measured. Free GPU memory (stop the service) and audit again.",
            )
        )
    if expected.node_rank == 0:
        serving = serves_here(expected, facts)
        not_running = None if serving or not unit_installed(facts) else "is not running"
        skipped = f"{expected.unit_name} {not_running}" if not_running else None
        findings += findings_for_decode(load.decode, skipped=skipped)
    return findings


# What the audit checks, in the order judge() checks it: skipped all on a machine with no GPU.
CHECKS = (
    "NVIDIA driver and its branch",
    "DKMS builds",
    "Secure Boot signing",
    "driver updates",
    "CUDA Toolkit",
    "NVSwitch fabric and Fabric Manager",
    "CUDA initialization",
    "driver against the CUDA Toolkit",
    "model weights",
    "GPU count",
    "persistence mode",
    "topology",
    "P2P",
    "IOMMU",
    "PCIe ACS",
    "SGLang release",
    "flash-attn build",
    "SGLang service and unit files",
    "PCIe links under load",
    "decode prompt",
)


def no_gpu_finding(expected: AuditExpectations, facts: AuditFacts) -> Finding | None:
    """The one finding for a machine with no NVIDIA GPU on its PCI bus (nvidia-smi finds none
    and no module is loaded): telling it to install a driver and reboot would mislead."""
    if facts.nvidia_pci_devices != 0 or facts.gpus or facts.loaded_module:
        return None
    return Finding(
        "fail",
        "no-nvidia-gpu",
        "No NVIDIA GPU on this machine's PCI bus (no display or 3D controller of vendor 0x10de "
        "in /sys/bus/pci/devices): nothing here can serve SGLang. Audit a GPU host of the "
        f"inventory instead. Skipped: {', '.join(CHECKS)}.",
        evidence={"nvidia_pci_devices": 0, "skipped": list(CHECKS)},
    )


def judge(expected: AuditExpectations, facts: AuditFacts) -> list[Finding]:
    """Every finding for one host, in a stable order."""
    no_gpu = no_gpu_finding(expected, facts)
    if no_gpu is not None:
        return [no_gpu]
    gpu_count = len(facts.gpus)
    vm = detected_vm(facts.virtualization)
    findings = _driver_findings(expected, facts)
    findings += findings_for_dkms(facts.dkms, facts.installed_module)
    findings += findings_for_secure_boot(facts.secure_boot, facts.installed_module)
    # A locked release takes no update within its branch; the host's own driver none at all.
    if not expected.driver_version and not host_source(expected):
        findings += findings_for_driver_update(
            expected.driver_branch,
            facts.installed_module,
            facts.module_candidate,
            expected.update_within_branch,
        )
    findings += findings_for_cuda(
        expected.cuda_version,
        facts.nvcc,
        expected.nvcc_path,
        host_source(expected),
        expected.flash_attn_build,
    )
    # Fabric Manager goes with the driver package (a reboot-pending one is the reboot
    # finding's); without one, with the loaded module.
    loaded = facts.loaded_module["version"] if facts.loaded_module else None
    findings += findings_for_fabric(
        facts.fabric,
        facts.virtualization,
        facts.fabric_manager_service,
        facts.fabric_manager_package,
        facts.installed_module or loaded,
        [compute_cap_arch(gpu.get("compute_cap")) for gpu in facts.gpus or []],
    )
    findings += findings_for_cuda_init(facts.cuda_init)
    if facts.audited_on:  # records made before were judged without it: they stay as made
        findings += findings_for_driver_toolkit(
            facts.loaded_module, facts.nvcc, host_source(expected)
        )
    findings += findings_for_model(facts.model)
    findings += findings_for_gpu_count(expected.expected_gpu_count, gpu_count)
    findings += findings_for_gpu_model(expected.expected_gpu_model, facts.gpus)
    findings += findings_for_persistence(facts.gpus, facts.persistenced)
    findings += findings_for_topology(facts.topology, gpu_count)
    findings += findings_for_p2p(facts.p2p, gpu_count, vm)
    findings += findings_for_iommu(facts.iommu, gpu_count, vm)
    findings += findings_for_acs(
        facts.pcie_acs, peer_path(facts), expected.nccl_p2p_env, facts.topology, gpu_count
    )
    installed_sglang = facts.sglang_version
    findings += findings_for_sglang_version(
        expected.sglang_version, installed_sglang, expected.venv_path
    )
    findings += findings_for_flash_attn(
        expected.flash_attn_version,
        expected.flash_attn_cuda_archs,
        facts.flash_attn,
        facts.gpus,
        expected.flash_attn_build,
        expected.flash_attn_off_reason,
    )
    findings += findings_for_group_network(facts.group_network)
    findings += _service_findings(expected, facts)
    if facts.gpus:
        findings += _load_findings(expected, facts)
        findings += findings_for_gpu_health(
            facts.gpus,
            facts.kernel_xids,
            facts.memory_health,
            facts.nvlink_errors,
            facts.load.clock_reasons,
            facts.load.kind,
        )
        findings += findings_for_dcgm(facts.dcgm_diag)
    return findings


def facts_summary(facts: AuditFacts) -> dict:
    """The report's ``facts``: what people read (the whole record is under ``record``)."""
    load = facts.load
    return {
        "gpus": pcie_links(facts.gpus),
        "topology": {"matrix": facts.topology, "nvlink": topology_has_nvlink(facts.topology)},
        "p2p": {"matrix": facts.p2p, "ok": p2p_all_ok(facts.p2p)},
        "driver": {
            "loaded": facts.loaded_module,
            "installed": facts.installed_module,
            "userspace": facts.gpus[0]["driver_version"] if facts.gpus else None,
            "nvidia_smi_package": facts.nvidia_smi_package,
        },
        "cuda": facts.nvcc,
        "virtualization": facts.virtualization,
        "iommu": facts.iommu,
        "service": facts.service,
        "sglang_version": facts.sglang_version,
        "load": {"kind": load.kind, "samples": len(load.samples), "result": load.probe},
        "decode": load.decode,
    }


def audit_report(
    host_name: str, expected: AuditExpectations, facts: AuditFacts, findings: list[Finding]
) -> dict:
    """The whole JSON report of one host: its findings (``judge``'s), the facts people read,
    and the record they were judged from."""
    document = report(host_name, findings, facts_summary(facts))
    document["record"] = record_document(expected, facts)
    return document
