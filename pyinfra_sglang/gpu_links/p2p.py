"""What a host allows for GPU peer-to-peer (P2P) traffic, and the NCCL hint that follows.

NCCL >= 2.27 uses P2P up to PXB by default; NCCL_P2P_LEVEL=PHB/SYS turns it on through the
CPU. That is only safe where peer traffic really works:

- PCIe ACS redirect (ReqRedir/CmpltRedir) on a bridge above a GPU, or IOMMU translation (no
  iommu=pt), sends peer traffic to the root complex, and NCCL hangs on the first all-reduce
  (NVIDIA/nccl#1999, #2079): NCCL_P2P_DISABLE=1 instead (NCCL copies through host memory).
- Where NVML reports no P2P (``nvidia-smi topo -p2p r`` not OK; a VM without a GPUDirect
  clique), NCCL does not use P2P whatever the level says: no level is set.
- Otherwise the level follows the widest PCIe path, as before.

Pure functions over facts already read (NvidiaP2P, PcieAcs, IommuState, Virtualization):
the deploy renders from them and the audit judges them, from the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyinfra_sglang import data
from pyinfra_sglang.gpu_links.pcie import acs_redirect_flags
from pyinfra_sglang.parsers.system import iommu_passthrough

P2P_KEYS = ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE")


@dataclass(frozen=True)
class PeerPath:
    """The host's readings that decide P2P; a field is None when it was not read."""

    p2p: dict[str, dict[str, str]] | None = None  # topo -p2p r matrix
    acs: dict | None = None  # PcieAcs fact
    iommu: dict | None = None  # IommuState fact
    vm: str | None = None  # detected VM technology


@dataclass(frozen=True)
class P2PHint:
    """``level``: set NCCL_P2P_LEVEL from the topology; ``disable``: NCCL_P2P_DISABLE=1;
    ``none``: set neither (NVML reports no P2P). ``reason`` goes into the env file."""

    mode: Literal["level", "disable", "none"]
    reason: str


def allowed_values() -> dict[str, list[str]]:
    """What sglang_env may set NCCL_P2P_LEVEL and NCCL_P2P_DISABLE to (NCCL's docs)."""
    allowed = data.sglang_service().environment.nccl_p2p.allowed
    return {key: list(values) for key, values in allowed.items()}


def disable_env() -> dict[str, str]:
    return dict(data.sglang_service().environment.nccl_p2p.disable)


def acs_redirects(acs: dict | None) -> dict[str, list[str]]:
    """Bridges above a GPU whose ACS control has a redirect flag on: {address: flags on}."""
    if not acs:
        return {}
    flags = acs_redirect_flags()
    found = {}
    for bridges in acs["gpus"].values():
        for address in bridges:
            control = (acs["bridges"].get(address) or {}).get("acs_ctl") or {}
            on = [flag for flag in flags if control.get(flag)]
            if on:
                found[address] = on
    return dict(sorted(found.items()))


def acs_unread(acs: dict | None) -> list[str]:
    """Bridges above a GPU whose ACS state lspci did not give (no block, or not root)."""
    if not acs:
        return []
    return sorted(
        {
            address
            for bridges in acs["gpus"].values()
            for address in bridges
            if address not in acs["bridges"] or acs["bridges"][address]["acs_ctl"] is None
        }
    )


def iommu_translates(iommu: dict | None) -> bool:
    """The IOMMU is on and translates DMA (no iommu=pt / iommu.passthrough=1)."""
    return bool(iommu and iommu.get("active") and not iommu_passthrough(iommu))


def p2p_missing(p2p: dict[str, dict[str, str]] | None) -> list[str]:
    """GPU pairs whose P2P read status is not OK ("GPU0-GPU1 NS"); [] when not read."""
    if not p2p:
        return []
    names = sorted(p2p, key=lambda name: int(name[3:]))
    return [
        f"{a}-{b} {p2p[a].get(b, '?')}"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if p2p[a].get(b) != "OK"
    ]


def _shown(items: list[str], most: int = 4) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def p2p_hint(path: PeerPath | None) -> P2PHint:
    """The NCCL P2P hint for a multi-GPU PCIe host, from what it allows."""
    if path is None:
        return P2PHint("level", "peer traffic not read: the level follows the topology alone")
    disable_when = set(data.sglang_service().environment.nccl_p2p.disable_when)
    missing = p2p_missing(path.p2p)
    if path.vm:
        if missing:
            return P2PHint(
                "none",
                f"VM ({path.vm}): NVML reports no P2P ({_shown(missing)}) and NCCL copies "
                "through host memory; P2P needs a GPUDirect clique from the hypervisor "
                "(docs/pcie-p2p.md)",
            )
        if path.p2p:
            return P2PHint("level", f"VM ({path.vm}): NVML reports P2P between every GPU pair")
        return P2PHint("level", "P2P status not read: the level follows the topology alone")
    redirects = acs_redirects(path.acs)
    if redirects and "acs-redirect" in disable_when:
        shown = _shown([f"{a} {'+'.join(f)}" for a, f in redirects.items()])
        return P2PHint(
            "disable",
            f"PCIe ACS redirects peer traffic above the GPUs ({shown}); P2P can hang NCCL "
            "(NVIDIA/nccl#2079)",
        )
    if iommu_translates(path.iommu) and "iommu-translation" in disable_when:
        return P2PHint(
            "disable",
            "the IOMMU translates DMA (no iommu=pt): peer traffic goes through the root "
            "complex and can hang NCCL (NVIDIA/nccl#1999)",
        )
    if missing:
        return P2PHint(
            "none",
            f"NVML reports no P2P ({_shown(missing)}); NCCL copies through host memory",
        )
    if path.p2p:
        return P2PHint("level", "NVML reports P2P between every GPU pair; no ACS redirect")
    return P2PHint("level", "P2P status not read: the level follows the topology alone")


def check_p2p_env(env: dict[str, str]) -> str | None:
    """Why ``env`` (sglang_env) sets NCCL_P2P_LEVEL/NCCL_P2P_DISABLE to a value NCCL does
    not take, naming the allowed ones; None when it does not."""
    for key, allowed in allowed_values().items():
        if key in env and env[key] not in allowed:
            return f"{key} must be one of {', '.join(allowed)} (NCCL's values), not {env[key]!r}"
    return None
