"""Measured link bandwidth (host_programs/link_probe.py) against each link's theoretical rate."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.topology import NVLINK
from pyinfra_sglang.gpu_links.pcie import pcie_bandwidth_gbs
from pyinfra_sglang.gpus import find_gpu


def low_fraction() -> float:
    return float(data.diagnosis().bandwidth.low_fraction)


def findings_for_bandwidth(
    probe: dict, links: list[dict], topology: dict[str, dict[str, str]]
) -> list[Finding]:
    """``probe``: link_probe.py's JSON; ``links``: pyinfra_sglang.audit.links.pcie_links rows of
    the same GPUs; ``topology``: the topo -m matrix (which pairs ride NVLink)."""
    floor = low_fraction()
    findings: list[Finding] = []
    by_index = {link["index"]: link for link in links}
    for measured in probe.get("gpus", []):
        link = by_index.get(measured["index"])
        pcie = (link or {}).get("pcie") or {}
        if not pcie.get("gen_max") or not pcie.get("width_max"):
            continue
        capacity = pcie_bandwidth_gbs(pcie["gen_max"], pcie["width_max"])
        worst = min(measured["h2d_gbs"], measured["d2h_gbs"])
        evidence = {
            "h2d_gbs": measured["h2d_gbs"],
            "d2h_gbs": measured["d2h_gbs"],
            "capacity_gbs": round(capacity, 1),
            "fraction": round(worst / capacity, 2),
        }
        where = f"Gen{pcie['gen_max']} x{pcie['width_max']} ({capacity:.1f} GB/s per direction)"
        if worst < floor * capacity:
            findings.append(
                Finding(
                    "warn",
                    "pcie-bandwidth-low",
                    f"GPU {measured['index']}: host->GPU {measured['h2d_gbs']:.1f} GB/s, GPU->host "
                    f"{measured['d2h_gbs']:.1f} GB/s: {worst / capacity:.0%} of {where}, under "
                    f"{floor:.0%}. Check the link's width and generation under load, a PCIe switch "
                    "shared with other GPUs, and IOMMU translation (iommu=pt).",
                    gpu=measured["index"],
                    evidence=evidence,
                )
            )
        else:
            findings.append(
                Finding(
                    "ok",
                    "pcie-bandwidth",
                    f"GPU {measured['index']}: {worst:.1f} GB/s both ways, "
                    f"{worst / capacity:.0%} of {where}.",
                    gpu=measured["index"],
                    evidence=evidence,
                )
            )
    for pair in probe.get("peers", []):
        cell = topology.get(f"GPU{pair['src']}", {}).get(f"GPU{pair['dst']}", "")
        spec = find_gpu((by_index.get(pair["src"]) or {}).get("name") or "")
        if NVLINK.fullmatch(cell) and spec and spec.nvlink_bandwidth_gbs:
            # The spec's NVLink figure counts both directions; a copy uses one.
            capacity, path = spec.nvlink_bandwidth_gbs / 2, f"NVLink ({cell})"
        else:
            capacity, path = None, f"PCIe ({cell or 'path unknown'})"
        share = f", {pair['gbs'] / capacity:.0%} of {capacity:.0f} GB/s" if capacity else ""
        findings.append(
            Finding(
                "ok",
                "peer-bandwidth",
                f"GPU {pair['src']} -> GPU {pair['dst']}: {pair['gbs']:.1f} GB/s over {path}{share}"
                + ("" if pair.get("p2p_access", True) else " (no P2P: staged through host memory)")
                + ".",
                evidence=dict(pair),
            )
        )
    if probe.get("allreduce"):
        largest = max(probe["allreduce"], key=lambda row: row["size_mib"])
        findings.append(
            Finding(
                "ok",
                "allreduce-bandwidth",
                f"NCCL all-reduce over {len(probe.get('gpus', []))} GPUs: bus bandwidth "
                + ", ".join(
                    f"{r['busbw_gbs']:.1f} GB/s at {r['size_mib']} MiB" for r in probe["allreduce"]
                )
                + ".",
                evidence={"largest_busbw_gbs": largest["busbw_gbs"], "rows": probe["allreduce"]},
            )
        )
    return findings
