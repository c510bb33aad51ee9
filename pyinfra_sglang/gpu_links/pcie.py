"""PCIe (data/pcie.toml): theoretical bandwidth of a link by generation and width; the ACS
flags that redirect peer traffic; the link probe's deadline for its peer tests."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra_sglang import data


@dataclass(frozen=True)
class PcieGeneration:
    gen: int
    transfer_rate_gts: float
    encoding: str

    @property
    def encoding_efficiency(self) -> float:
        """Share of line bits that carry data: 8b/10b -> 0.8, 128b/130b -> ~0.985."""
        data_bits, line_bits = (int(part.rstrip("b")) for part in self.encoding.split("/"))
        return data_bits / line_bits


def pcie_generation(gen: int) -> PcieGeneration:
    """The table's entry for PCIe generation ``gen``; ValueError for one it lacks."""
    table = data.pcie().generations
    # As the file spells it ("5"): 5.0 or True is no generation.
    entry = table.get(int(str(gen))) if str(gen).isdigit() else None
    if entry is None:
        known = ", ".join(str(key) for key in sorted(table))
        raise ValueError(f"unknown PCIe generation {gen!r}; known: {known}")
    return PcieGeneration(
        gen=gen, transfer_rate_gts=entry.transfer_rate_gts, encoding=entry.encoding
    )


def pcie_bandwidth_gbs(gen: int, width: int) -> float:
    """Theoretical bytes per second in one direction of a Gen ``gen`` x``width`` link, in GB/s
    (10^9 bytes, the unit NVML's KB/s counters scale to): Gen5 x16 -> ~63.0."""
    if width < 1:
        raise ValueError(f"PCIe link width must be 1 or more lanes, not {width!r}")
    spec = pcie_generation(gen)
    return spec.transfer_rate_gts * width * spec.encoding_efficiency / 8


def acs_redirect_flags() -> tuple[str, ...]:
    """ACSCtl flags that send peer traffic up to the root complex (ReqRedir, CmpltRedir)."""
    return data.pcie().acs.redirect_flags


def peer_probe_timeout_s() -> int:
    """Seconds each peer stage of the link probe may run before it counts as hung."""
    return int(data.pcie().peer_probe.timeout_s)
