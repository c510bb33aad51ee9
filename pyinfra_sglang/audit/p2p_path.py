"""Can GPU peer traffic be trusted on this host? PCIe ACS on the bridges above the GPUs
against the NCCL P2P setting the service runs with (pyinfra_sglang/gpu_links/p2p.py decides that
setting; IOMMU translation is judged by drift.findings_for_iommu, NVML's P2P status by
topology.findings_for_p2p).

ACS redirect sends peer requests and completions to the root complex; NCCL then hangs on
its first all-reduce where it uses P2P (NVIDIA/nccl#1999, #2079). Forcing P2P through the
CPU (NCCL_P2P_LEVEL=PHB/SYS) over such bridges is a hang waiting to happen; NCCL's own
default (P2P up to PXB since 2.27) still uses it between GPUs behind one switch.
"""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.gpu_links.p2p import PeerPath, acs_redirects, acs_unread, p2p_hint
from pyinfra_sglang.parsers.topo import topology_has_nvlink, widest_pcie_path
from pyinfra_sglang.serving.render import nccl_p2p_level

# Levels that send peer traffic through the CPU's host bridge or across sockets.
THROUGH_CPU = ("PHB", "SYS")
FIX_ACS = (
    "Turn ACS off on the bridges above the GPUs (BIOS: ACS / PCIe ACS control, or "
    "`pci=noacs` on the kernel command line), or keep NCCL_P2P_DISABLE=1 (docs/pcie-p2p.md)"
)


def service_p2p(
    forced: dict[str, str],
    path: PeerPath,
    topology: dict[str, dict[str, str]],
    gpu_count: int,
) -> tuple[str, str | None]:
    """What the service's NCCL does with P2P, as the env file sets it: ``("disabled", why)``,
    ``("level", LEVEL)`` or ``("default", None)`` (NCCL's own choice)."""
    if forced.get("NCCL_P2P_DISABLE") == "1":
        return "disabled", "sglang_env sets NCCL_P2P_DISABLE=1"
    if "NCCL_P2P_LEVEL" in forced:
        level = forced["NCCL_P2P_LEVEL"]
        return (
            ("disabled", "sglang_env sets NCCL_P2P_LEVEL=LOC")
            if level == "LOC"
            else (
                "level",
                level,
            )
        )
    pcie_only = gpu_count > 1 and bool(topology) and not topology_has_nvlink(topology)
    if not pcie_only:
        return "default", None
    hint = p2p_hint(path)
    if hint.mode == "disable":
        return "disabled", "the env file sets NCCL_P2P_DISABLE=1"
    if hint.mode == "none":
        return "default", None
    return "level", nccl_p2p_level(widest_pcie_path(topology))


def findings_for_acs(
    acs: dict | None,
    path: PeerPath,
    forced: dict[str, str],
    topology: dict[str, dict[str, str]],
    gpu_count: int,
) -> list[Finding]:
    """pcie-acs-redirect: fail where P2P is forced through the CPU (PHB/SYS) over bridges
    that redirect it, warn otherwise; pcie-acs-unknown where the state was not read."""
    if gpu_count < 2 or acs is None or path.vm:
        return []  # no peer traffic; not read; a VM's bridges are virtual (see p2p-unavailable)
    if not acs["lspci"]:
        return [
            Finding(
                "warn",
                "pcie-acs-unknown",
                "lspci is not installed: PCIe ACS on the bridges above the GPUs was not read. "
                "Install pciutils (the base role does) and audit again.",
            )
        ]
    if not acs["gpus"]:
        return [
            Finding(
                "warn",
                "pcie-acs-unknown",
                "no NVIDIA GPU found under /sys/bus/pci/devices: ACS above the GPUs was not read.",
            )
        ]
    findings: list[Finding] = []
    redirects = acs_redirects(acs)
    state, detail = service_p2p(forced, path, topology, gpu_count)
    evidence = {"bridges": redirects, "nccl": {"p2p": state, "detail": detail}}
    shown = ", ".join(f"{a} ({'+'.join(f)})" for a, f in list(redirects.items())[:6])
    if redirects and state == "level" and detail in THROUGH_CPU:
        findings.append(
            Finding(
                "fail",
                "pcie-acs-redirect",
                f"PCIe ACS redirects peer traffic on {len(redirects)} bridges above the GPUs "
                f"({shown}) and the service forces P2P through the CPU (NCCL_P2P_LEVEL={detail}): "
                "NCCL hangs on the first all-reduce there (NVIDIA/nccl#1999, #2079). "
                f"{FIX_ACS}; drop NCCL_P2P_LEVEL from sglang_env.",
                evidence=evidence,
            )
        )
    elif redirects:
        if state == "disabled":
            running = (
                f"the service runs with P2P off ({detail}): all-reduce copies through host memory"
            )
        elif state == "level":
            running = (
                f"the service sets NCCL_P2P_LEVEL={detail}: P2P between GPUs behind one PCIe "
                "switch, where it can hang"
            )
        else:
            running = (
                "NCCL's default (PXB) still uses P2P between GPUs behind one PCIe switch, where "
                "it can hang"
            )
        findings.append(
            Finding(
                "warn",
                "pcie-acs-redirect",
                f"PCIe ACS redirects peer traffic on {len(redirects)} bridges above the GPUs "
                f"({shown}); {running}. {FIX_ACS}.",
                evidence=evidence,
            )
        )
    unread = acs_unread(acs)
    if unread:
        findings.append(
            Finding(
                "warn",
                "pcie-acs-unknown",
                f"ACS state of {len(unread)} bridges above the GPUs was not read "
                f"({', '.join(unread[:6])}): lspci shows capabilities to root only. Run the "
                "audit with --sudo (or as root).",
                evidence={"bridges": unread},
            )
        )
    if not findings:
        bridges = sorted({b for chain in acs["gpus"].values() for b in chain})
        findings.append(
            Finding(
                "ok",
                "pcie-acs",
                f"no ACS redirect on the {len(bridges)} bridges above {len(acs['gpus'])} GPUs.",
                evidence={"bridges": bridges},
            )
        )
    return findings


def findings_for_probe_hang(hang: dict | None, p2p_state: str) -> list[Finding]:
    """p2p-probe-hang: the link probe's peer test ran past its deadline and was killed (the
    ACS/IOMMU symptom). fail unless the service already runs with P2P off."""
    if not hang:
        return []
    level = "warn" if p2p_state == "disabled" else "fail"
    after = (
        "The service itself runs with P2P off, so it is spared; the links are not measured."
        if level == "warn"
        else 'Set sglang_env: {"NCCL_P2P_DISABLE": "1"} for this host now, then turn ACS off '
        "(BIOS, or `pci=noacs`) or add iommu=pt, and audit again."
    )
    return [
        Finding(
            level,
            "p2p-probe-hang",
            f"The link probe's {hang.get('stage', 'peer')} test did not finish within "
            f"{hang.get('limit_s')} s and was killed: GPU peer traffic hangs on this host, as "
            f"NCCL's all-reduce would (NVIDIA/nccl#1999, #2079). {after}",
            evidence=dict(hang),
        )
    ]
