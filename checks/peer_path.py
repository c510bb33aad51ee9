"""What the current host allows for GPU peer traffic, read from its facts: NVML's P2P status,
ACS on the bridges above the GPUs, the IOMMU, whether it is a VM (pyinfra_sglang/gpu_links/p2p.py
turns them into the NCCL hint). The deploy and the audit read it alike, so both render the
same env file."""

from __future__ import annotations

from checks.facts import IommuState, NvidiaP2P, PcieAcs, Virtualization, read_once
from pyinfra_sglang.gpu_links.p2p import PeerPath
from pyinfra_sglang.parsers.system import detected_vm


def read_peer_path(host, gpu_count: int) -> PeerPath | None:
    """The host's PeerPath; None for fewer than two GPUs (no peer traffic)."""
    if gpu_count < 2:
        return None
    return PeerPath(
        p2p=read_once(host, NvidiaP2P, mode="r"),
        acs=read_once(host, PcieAcs),
        iommu=read_once(host, IommuState),
        vm=detected_vm(read_once(host, Virtualization)),
    )
