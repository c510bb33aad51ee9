"""PCIe link rates (data/pcie.toml, pyinfra_sglang/gpu_links/pcie.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyinfra_sglang.gpu_links.pcie import pcie_bandwidth_gbs, pcie_generation

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200x2-nvlink-vm"


@pytest.mark.parametrize(
    ("gen", "width", "gbs"),
    [
        (1, 16, 4.0),  # 2.5 GT/s x 16 x 8/10 / 8
        (2, 16, 8.0),
        (3, 16, 15.754),  # 8 GT/s x 16 x 128/130 / 8
        (4, 16, 31.508),
        (5, 16, 63.015),
        (5, 8, 31.508),  # a link trained to half its lanes halves the rate
        (5, 1, 3.938),
        (6, 16, 128.0),
    ],
)
def test_theoretical_rate_per_direction(gen, width, gbs):
    assert pcie_bandwidth_gbs(gen, width) == pytest.approx(gbs, abs=1e-3)


def test_encodings_by_generation():
    assert [pcie_generation(g).encoding for g in range(1, 7)] == [
        "8b/10b",
        "8b/10b",
        "128b/130b",
        "128b/130b",
        "128b/130b",
        "1b/1b",
    ]
    assert pcie_generation(1).encoding_efficiency == 0.8
    assert pcie_generation(6).transfer_rate_gts == 64.0


def test_each_generation_doubles_from_gen3_on():
    for gen in (4, 5):
        assert pcie_bandwidth_gbs(gen, 16) == pytest.approx(2 * pcie_bandwidth_gbs(gen - 1, 16))


def test_measured_saturating_copy_stays_under_the_theoretical_rate():
    # NVML's PCIe counter read 62,130,313 KB/s during the device->host copy on a Gen5 x16 H200:
    # just under theory when KB = 1000 bytes (it would exceed it read as KiB).
    samples = json.loads((H200 / "samples.json").read_text())
    peak_kbs = max(max(row["0"][2], row["0"][3]) for row in samples)
    nvml = json.loads((H200 / "nvml.json").read_text())["gpus"][0]
    capacity = pcie_bandwidth_gbs(nvml["pcie_gen_max"], nvml["pcie_width_max"])
    assert 0.95 < peak_kbs * 1e3 / 1e9 / capacity < 1.0
    assert peak_kbs * 1024 / 1e9 > capacity


@pytest.mark.parametrize(("gen", "width"), [(0, 16), (7, 16), (5, 0)])
def test_unknown_generation_or_width_is_refused(gen, width):
    with pytest.raises(ValueError, match="PCIe"):
        pcie_bandwidth_gbs(gen, width)
