"""GPU load samples: read the sampler's JSON lines or the shared capture, and summarize per GPU.

One sample is ``{"t": seconds, "gpus": [{"index", "gpu_util", "mem_util", "pcie_tx_kbps",
"pcie_rx_kbps", "sm_clock_mhz", "power_w", ...}], "cpu": {...} | None}``, the format of
host_programs/gpu_sampler.py. The shared capture (tests/fixtures/gpu/*/samples.json) is a JSON
list of ``{"t": epoch, "<gpu index>": [gpu_util, mem_util, pcie_tx_KBps, pcie_rx_KBps,
sm_clock_MHz, power_mW]}``; it is read into the same shape.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from pyinfra_sglang.served_benchmark.limits import check_count, loads, read_capped

# NVML's PCIe counters are in KB/s of 1000 bytes (a saturated Gen5 x16 link read 62.1e6, just
# under its 63.0 GB/s; as KiB it would exceed it).
KBPS_PER_GBS = 1e6
# NVML documents its NVLink throughput counters in KiB (pynvml: "throughput in KiB").
NVLINK_COUNTER_BYTES = 1024
CAPTURE_FIELDS = (
    "gpu_util",
    "mem_util",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "sm_clock_mhz",
    "power_mw",
)


def read_json_lines(path: str | Path, cap: str | None = None) -> list[dict]:
    """One object per line (the sampler's output, bench_serving's): blank lines skipped, a
    cut-off last line dropped (its writer was stopped mid-line). Read within the caps of
    data/diagnosis.toml [limits] (served_benchmark/limits.py): the file's bytes and nesting
    and, with ``cap`` (a key there, e.g. ``max_samples``), its number of lines; OverCapError
    past one."""
    lines = [line for line in read_capped(path).splitlines() if line.strip()]
    if cap is not None:
        check_count(path, len(lines), "lines", cap)
    samples = []
    for number, line in enumerate(lines, 1):
        try:
            samples.append(loads(f"{path}: line {number}", line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}: line {number} is not JSON") from None
    return samples


def samples_from_capture(rows: list[dict]) -> list[dict]:
    """The shared capture's rows in the sampler's shape (t from the first row, power in W)."""
    start = rows[0]["t"] if rows else 0.0
    samples = []
    for row in rows:
        gpus = []
        for key in sorted((k for k in row if k.isdigit()), key=int):
            values = dict(zip(CAPTURE_FIELDS, row[key]))
            values["power_w"] = values.pop("power_mw") / 1000
            gpus.append({"index": int(key), **values})
        samples.append({"t": row["t"] - start, "gpus": gpus, "cpu": None})
    return samples


def load_samples(path: str | Path) -> list[dict]:
    """Either format, told apart by the first character: ``[`` capture, ``{`` JSON lines."""
    text = Path(path).read_text().lstrip()
    if text.startswith("["):
        return samples_from_capture(json.loads(text))
    return read_json_lines(path)


def percentile(values: list[float], percent: float) -> float | None:
    """The ``percent``-th percentile (0..100), interpolated between ranks; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * percent / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Spread:
    median: float | None
    p90: float | None

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values) if values else None, percentile(values, 90))


@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str | None  # as NVML reports it ("NVIDIA H200"), where the sampler recorded it
    samples: int
    busy_share: float  # share of samples at or above the busy utilization
    gpu_util: Spread
    mem_util: Spread
    pcie_tx_gbs: Spread
    pcie_rx_gbs: Spread
    pcie_busier_gbs: Spread  # the busier PCIe direction of each sample
    sm_clock_mhz: Spread
    power_w: Spread
    # Medians over busy samples only: what the GPU looked like while it worked.
    busy_mem_util: float | None
    busy_sm_clock_mhz: float | None
    busy_power_w: float | None
    pcie_busier_series: tuple[float, ...]  # per sample, for shares against a link's capacity
    # Both directions added, per sample: copies that take turns keep a link busy with neither
    # direction near its rate (tests/fixtures/gpu/h200-llm-phases-sampler, pcie_alt).
    pcie_both_series: tuple[float, ...]
    nvlink_busier_gbs: Spread | None  # where the sampler read NVLink counters
    nvlink_busier_series: tuple[float, ...]
    nvlink_both_series: tuple[float, ...]
    # Facts the sampler recorded (None when the samples lack them).
    sm_clock_max_mhz: float | None
    power_limit_w: float | None
    pcie_gen_max: int | None
    pcie_width: int | None


def _series(readings: list[dict], key: str) -> list[float]:
    return [r[key] for r in readings if r.get(key) is not None]


def _pcie_gbs(reading: dict, combine=max) -> float | None:
    """The busier PCIe direction's GB/s (``combine=sum``: both directions added)."""
    directions = [reading.get("pcie_tx_kbps"), reading.get("pcie_rx_kbps")]
    known = [d for d in directions if d is not None]
    return combine(known) / KBPS_PER_GBS if known else None


def _nvlink_rates_gbs(timed: list[tuple[float, dict]], combine=max) -> list[float]:
    """The busier NVLink direction's GB/s between consecutive samples (``combine=sum``: both
    directions added), from NVML's cumulative KiB counters (on a real H200 pair their rate
    matched a 384.8 GB/s copy: tests/fixtures/gpu/h200x2-nvlink-vm-sampler)."""
    rates = []
    # The sampler reads the counters every --nvlink-interval: pair the samples that hold them.
    timed = [(t, reading) for t, reading in timed if reading.get("nvlink_raw")]
    for (t0, a), (t1, b) in zip(timed, timed[1:]):
        raw_a, raw_b = a.get("nvlink_raw") or {}, b.get("nvlink_raw") or {}
        deltas = [
            raw_b[name] - raw_a[name]
            for name in raw_b
            if raw_a.get(name) is not None and raw_b[name] is not None
        ]
        if deltas and t1 > t0:
            rates.append(combine(deltas) * NVLINK_COUNTER_BYTES / 1e9 / (t1 - t0))
    return rates


def summarize_gpu(samples: list[dict], index: int, busy_util_pct: float) -> GpuSummary:
    """Medians, 90th percentiles and the busy share of GPU ``index`` over ``samples``."""
    timed = [(s["t"], g) for s in samples for g in s["gpus"] if g["index"] == index]
    readings = [g for _, g in timed]
    busy = [r for r in readings if (r.get("gpu_util") or 0) >= busy_util_pct]
    links = [v for v in map(_pcie_gbs, readings) if v is not None]
    links_both = [v for v in (_pcie_gbs(r, sum) for r in readings) if v is not None]
    nvlink = _nvlink_rates_gbs(timed)

    def busy_median(key: str) -> float | None:
        values = _series(busy, key)
        return statistics.median(values) if values else None

    def fact(key: str):
        values = _series(readings, key)
        return max(values) if values else None

    return GpuSummary(
        index=index,
        name=next((r["name"] for r in readings if r.get("name")), None),
        samples=len(readings),
        busy_share=len(busy) / len(readings) if readings else 0.0,
        gpu_util=Spread.of(_series(readings, "gpu_util")),
        mem_util=Spread.of(_series(readings, "mem_util")),
        pcie_tx_gbs=Spread.of([v / KBPS_PER_GBS for v in _series(readings, "pcie_tx_kbps")]),
        pcie_rx_gbs=Spread.of([v / KBPS_PER_GBS for v in _series(readings, "pcie_rx_kbps")]),
        pcie_busier_gbs=Spread.of(links),
        sm_clock_mhz=Spread.of(_series(readings, "sm_clock_mhz")),
        power_w=Spread.of(_series(readings, "power_w")),
        busy_mem_util=busy_median("mem_util"),
        busy_sm_clock_mhz=busy_median("sm_clock_mhz"),
        busy_power_w=busy_median("power_w"),
        pcie_busier_series=tuple(links),
        pcie_both_series=tuple(links_both),
        nvlink_busier_gbs=Spread.of(nvlink) if nvlink else None,
        nvlink_busier_series=tuple(nvlink),
        nvlink_both_series=tuple(_nvlink_rates_gbs(timed, sum)),
        sm_clock_max_mhz=fact("sm_clock_max_mhz"),
        power_limit_w=fact("power_limit_w"),
        pcie_gen_max=fact("pcie_gen_max"),
        pcie_width=fact("pcie_width"),
    )


def gpu_indexes(samples: list[dict]) -> list[int]:
    return sorted({g["index"] for s in samples for g in s["gpus"]})


@dataclass(frozen=True)
class CpuSummary:
    processes: int  # most matching processes seen at once
    percent: Spread  # all matching processes together, % of one core
    max_process_percent: Spread  # the busiest one


def summarize_cpu(samples: list[dict]) -> CpuSummary | None:
    """Server CPU use over the samples; None when the samples carry none (the capture)."""
    cpu = [s["cpu"] for s in samples if s.get("cpu")]
    if not cpu:
        return None
    return CpuSummary(
        processes=max(c.get("processes", 0) for c in cpu),
        percent=Spread.of(_series(cpu, "percent")),
        max_process_percent=Spread.of(_series(cpu, "max_process_percent")),
    )
