"""Measured link bandwidth against each link's theoretical rate
(pyinfra_sglang/audit/bandwidth.py), on the link probe's real output from the 2x H200 NVLink VM."""

from __future__ import annotations

import json
from pathlib import Path

from checks.facts import NvidiaGpus
from pyinfra_sglang.audit.bandwidth import findings_for_bandwidth
from pyinfra_sglang.audit.links import pcie_links
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.parsers.topo import parse_topo_matrix
from tests.unit.captures import captured_lines

PROBE = json.loads(
    (
        Path(__file__).resolve().parents[1]
        / "fixtures"
        / "audit"
        / "h200x2-nvlink-vm"
        / "link_probe.json"
    ).read_text()
)
QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
LINKS = pcie_links(NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY)))
TOPO = parse_topo_matrix(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m"))


def by_code(findings):
    grouped: dict[str, list] = {}
    for finding in findings:
        grouped.setdefault(finding.code, []).append(finding)
    return grouped


def test_real_h200_links_reach_most_of_their_rate():
    found = by_code(findings_for_bandwidth(PROBE, LINKS, TOPO))
    assert set(found) == {"pcie-bandwidth", "peer-bandwidth", "allreduce-bandwidth"}
    for finding in found["pcie-bandwidth"]:
        assert finding.level == "ok" and finding.evidence["capacity_gbs"] == 63.0
        assert 0.8 < finding.evidence["fraction"] < 0.95  # 54.7-55.0 GB/s of 63.0
    assert [f.evidence["src"] for f in found["peer-bandwidth"]] == [0, 1]
    assert all(
        "over NVLink (NV18)" in f.message and "of 450 GB/s" in f.message
        for f in found["peer-bandwidth"]
    )
    [allreduce] = found["allreduce-bandwidth"]
    assert allreduce.evidence["largest_busbw_gbs"] == max(
        r["busbw_gbs"] for r in PROBE["allreduce"]
    )


def test_a_link_under_70_percent_of_its_rate_is_low():
    probe = {
        "gpus": [
            {"index": 0, "h2d_gbs": 25.2, "d2h_gbs": 54.0},
            {"index": 1, "h2d_gbs": 55.0, "d2h_gbs": 55.0},
        ]
    }
    found = by_code(findings_for_bandwidth(probe, LINKS, TOPO))
    [low] = found["pcie-bandwidth-low"]
    assert (low.level, low.gpu) == ("warn", 0)
    assert "40% of Gen5 x16 (63.0 GB/s per direction)" in low.message
    assert [f.gpu for f in found["pcie-bandwidth"]] == [1]


def test_peers_over_pcie_have_no_nvlink_share_and_say_when_p2p_is_missing():
    topo = {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}}
    probe = {"peers": [{"src": 0, "dst": 1, "p2p_access": False, "gbs": 21.5}]}
    [peer] = findings_for_bandwidth(probe, LINKS, topo)
    assert (
        peer.message
        == "GPU 0 -> GPU 1: 21.5 GB/s over PCIe (PHB) (no P2P: staged through host memory)."
    )


def test_links_without_a_known_maximum_are_not_judged():
    links = [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "pcie": {
                "gen_current": None,
                "gen_max": None,
                "width_current": None,
                "width_max": None,
            },
        }
    ]
    assert (
        findings_for_bandwidth({"gpus": [{"index": 0, "h2d_gbs": 1.0, "d2h_gbs": 1.0}]}, links, {})
        == []
    )
