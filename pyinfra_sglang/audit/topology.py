"""How the GPUs a tensor-parallel group spans are connected, and whether they can reach each
other's memory directly (P2P)."""

from __future__ import annotations

import itertools
import re
from collections import Counter

from pyinfra_sglang.audit.findings import Finding

NVLINK = re.compile(r"NV\d+")
# What each topo -m cell means for the traffic between two GPUs (nvidia-smi's legend).
PATH_MEANING = {
    "PIX": "one PCIe bridge",
    "PXB": "several PCIe bridges",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "the links between host bridges of one NUMA node",
    "SYS": "the interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
}


def gpu_pairs(matrix: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(GPUi, GPUj, cell) for each unordered pair of GPUs of a topo matrix."""
    names = sorted(matrix, key=lambda name: int(name[3:]))
    return [(a, b, matrix[a].get(b, "?")) for a, b in itertools.combinations(names, 2)]


def findings_for_topology(matrix: dict[str, dict[str, str]], gpu_count: int) -> list[Finding]:
    """topology-pcie-only when tensor parallelism spans GPUs some of which share no NVLink
    (every all-reduce then crosses PCIe); topology-cross-numa for pairs across NUMA nodes."""
    if gpu_count == 0:
        return []
    if gpu_count == 1:
        return [Finding("ok", "topology", "one GPU: no GPU-to-GPU traffic for tensor parallelism.")]
    pairs = gpu_pairs(matrix)
    if not pairs:
        return [
            Finding(
                "warn",
                "topology-unknown",
                f"{gpu_count} GPUs but `nvidia-smi topo -m` gave no matrix; the links between "
                "GPUs are unknown. Run `nvidia-smi topo -m` on the host and check its output.",
            )
        ]
    kinds = Counter("NV#" if NVLINK.fullmatch(cell) else cell for _, _, cell in pairs)
    findings: list[Finding] = []
    pcie_pairs = [(a, b, cell) for a, b, cell in pairs if not NVLINK.fullmatch(cell)]
    if pcie_pairs:
        worst = max(
            (cell for _, _, cell in pcie_pairs),
            key=lambda c: list(PATH_MEANING).index(c) if c in PATH_MEANING else -1,
        )
        span = (
            "none of the" if len(pcie_pairs) == len(pairs) else f"{len(pcie_pairs)} of {len(pairs)}"
        )
        findings.append(
            Finding(
                "warn",
                "topology-pcie-only",
                f"Tensor parallelism over {gpu_count} GPUs, {span} GPU pairs joined by NVLink: "
                f"all-reduce traffic crosses PCIe (worst path {worst}: through "
                f"{PATH_MEANING.get(worst, 'an unknown path')}). Expect all-reduce to bound decode "
                "at high batch; keep the NCCL hints the service renders for PCIe-only hosts, and "
                "measure with the bench before tuning anything else.",
                evidence={"pairs": dict(kinds)},
            )
        )
    cross = [f"{a}-{b}" for a, b, cell in pairs if cell == "SYS"]
    if cross:
        findings.append(
            Finding(
                "warn",
                "topology-cross-numa",
                f"{len(cross)} GPU pairs cross NUMA nodes (SYS: {', '.join(cross[:6])}"
                f"{'...' if len(cross) > 6 else ''}): their traffic crosses the CPU "
                "interconnect. Prefer a tensor-parallel group within one NUMA node, or check the "
                "BIOS NUMA layout.",
                evidence={"pairs": cross},
            )
        )
    if not findings:
        findings.append(
            Finding(
                "ok",
                "topology",
                f"every GPU pair ({len(pairs)}) joined by NVLink.",
                evidence={"pairs": dict(kinds)},
            )
        )
    return findings


def p2p_all_ok(p2p: dict[str, dict[str, str]]) -> bool:
    """Every pair of different GPUs reads P2P ``OK`` (False without a matrix)."""
    pairs = gpu_pairs(p2p)
    return bool(pairs) and all(cell == "OK" for _, _, cell in pairs)


def findings_for_p2p(
    p2p: dict[str, dict[str, str]], gpu_count: int, vm: str | None
) -> list[Finding]:
    """p2p-unavailable when any pair of GPUs cannot read each other's memory directly."""
    if gpu_count < 2:
        return []
    pairs = gpu_pairs(p2p)
    if not pairs:
        return [
            Finding(
                "warn",
                "p2p-unavailable",
                "`nvidia-smi topo -p2p r` gave no matrix: peer-to-peer support is unknown.",
            )
        ]
    missing = [(a, b, cell) for a, b, cell in pairs if cell != "OK"]
    if not missing:
        return [Finding("ok", "p2p", f"P2P reads OK between every GPU pair ({len(pairs)}).")]
    clique = (
        "the hypervisor must expose the GPUs as a GPUDirect clique (QEMU's vfio-pci "
        "x-nv-gpudirect-clique, Proxmox's args; docs/pcie-p2p.md#in-a-vm-the-gpudirect-clique-"
        "qemu-proxmox) and ACS be off on the host"
    )
    every_ns = all(cell == "NS" for _, _, cell in missing) and len(missing) == len(pairs)
    if vm:
        where = f"This host is a VM ({vm}): {clique}. "
    elif every_ns:
        # Every pair "not supported": what a VM without a clique reports, and what a bare
        # host whose IOMMU or ACS blocks peer reads can report too (vm unknown here).
        where = (
            f"Every pair is NS: in a VM, {clique}; on bare metal, IOMMU translation or PCIe "
            "ACS on the bridges blocks it (docs/pcie-p2p.md). "
        )
    else:
        where = "IOMMU translation or PCIe ACS on the bridges can block it (docs/pcie-p2p.md). "
    shown = ", ".join(f"{a}-{b} {cell}" for a, b, cell in missing[:6])
    return [
        Finding(
            "warn",
            "p2p-unavailable",
            f"P2P reads unavailable for {len(missing)} of {len(pairs)} GPU pairs ({shown}); "
            f"NCCL falls back to copies through host memory. {where}".rstrip(),
            evidence={"pairs": {f"{a}-{b}": cell for a, b, cell in missing}},
        )
    ]
