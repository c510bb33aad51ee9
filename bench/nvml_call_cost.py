"""What each NVML reading the GPU sampler takes costs, per call: wall time and this process's
CPU time (user and system), on every GPU of the machine it runs on. Run on a GPU host with
nvidia-ml-py (the device machine: `python3 bench/nvml_call_cost.py`).

Why: the sampler asked for 0.1 s held 0.19 s on 2 H200s and used 75% of a core, 95% of it
system time (tests/fixtures/gpu/h200x2-tp-dp-sampler); this says which calls cost it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pyinfra_sglang" / "host_programs"))

from gpu_sampler import ProcessCpu

REPEAT = 20
# NVML's newer NVLink byte counters (nvml.h: NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES and _RCV_);
# a scope of UINT_MAX asks for all links at once.
NVLINK_BYTE_COUNTERS = (202, 204)
ALL_LINKS = 0xFFFFFFFF


def cost(call, *args) -> tuple[float, float, float, str]:
    """(wall ms, user ms, system ms) per call, and the first error if it fails."""
    error = ""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for _ in range(REPEAT):
        try:
            call(*args)
        except pynvml.NVMLError as failure:
            error = str(failure)
    wall = (time.perf_counter() - start) / REPEAT * 1000
    after = resource.getrusage(resource.RUSAGE_SELF)
    user = (after.ru_utime - usage.ru_utime) / REPEAT * 1000
    system = (after.ru_stime - usage.ru_stime) / REPEAT * 1000
    return wall, user, system, error


def counters(handle, fields) -> list[int]:
    return [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(handle, fields)]


def validate() -> None:
    """Each counter's rate against a copy of known speed: host->GPU 0 over PCIe, and GPU 0 ->
    GPU 1 over NVLink (when there are two GPUs)."""
    import torch

    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    pcie = [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
    size = 1 << 30
    host = torch.empty(size, dtype=torch.uint8).pin_memory()
    dev = torch.empty(size, dtype=torch.uint8, device="cuda:0")
    dev.copy_(host)
    torch.cuda.synchronize()
    before, start = counters(h0, pcie), time.perf_counter()
    for _ in range(20):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    after = counters(h0, pcie)
    tx, rx = ((a - b) / seconds / 1e9 for a, b in zip(after, before))
    print(
        f"host->gpu0 copy {20 * size / seconds / 1e9:.1f} GB/s; "
        f"pcie counters tx {tx:.1f} rx {rx:.1f} GB/s"
    )
    if torch.cuda.device_count() < 2:
        return
    other = torch.empty(size, dtype=torch.uint8, device="cuda:1")
    links = list(range(18))
    data = [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in links]
    data_rx = [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in links]
    byte_fields = [(f, ALL_LINKS) for f in NVLINK_BYTE_COUNTERS]
    other.copy_(dev)
    torch.cuda.synchronize()
    b_data, b_rx, b_bytes = counters(h0, data), counters(h0, data_rx), counters(h0, byte_fields)
    start = time.perf_counter()
    for _ in range(50):
        other.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    a_data, a_rx, a_bytes = counters(h0, data), counters(h0, data_rx), counters(h0, byte_fields)
    data_tx = (sum(a_data) - sum(b_data)) * 1024 / seconds / 1e9  # KiB per NVML
    data_rx = (sum(a_rx) - sum(b_rx)) * 1024 / seconds / 1e9
    xmit, rcv = ((a - b) / seconds / 1e9 for a, b in zip(a_bytes, b_bytes))
    print(
        f"gpu0->gpu1 copy {50 * size / seconds / 1e9:.1f} GB/s; nvlink data counters tx "
        f"{data_tx:.1f} rx {data_rx:.1f} GB/s; byte counters xmit {xmit:.1f} rcv {rcv:.1f} GB/s"
    )


def main() -> int:
    pynvml.nvmlInit()
    print(f"{'call':<44} {'gpu':>3} {'wall ms':>8} {'user ms':>8} {'sys ms':>8}")
    for index in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        links = []
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(h, link) == 1:
                    links.append(link)
            except pynvml.NVMLError:
                break
        nvlink = [
            (getattr(pynvml, name), link)
            for name in (
                "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
                "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
            )
            for link in links
        ]
        pcie_counters = [
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        ]
        calls = {
            "utilization": (pynvml.nvmlDeviceGetUtilizationRates, h),
            "memory info": (pynvml.nvmlDeviceGetMemoryInfo, h),
            "pcie throughput TX (20 ms sample)": (
                pynvml.nvmlDeviceGetPcieThroughput,
                h,
                pynvml.NVML_PCIE_UTIL_TX_BYTES,
            ),
            "pcie link gen": (pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
            "pcie link width": (pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            "sm clock": (pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
            "power": (pynvml.nvmlDeviceGetPowerUsage, h),
            f"field values: nvlink tx+rx x {len(links)} links": (
                pynvml.nvmlDeviceGetFieldValues,
                h,
                nvlink,
            ),
            f"field values: nvlink data tx x {len(links)} links": (
                pynvml.nvmlDeviceGetFieldValues,
                h,
                nvlink[: len(links)],
            ),
            f"field values: nvlink xmit+rcv bytes x {len(links)} links": (
                pynvml.nvmlDeviceGetFieldValues,
                h,
                [(field, link) for field in NVLINK_BYTE_COUNTERS for link in links],
            ),
            "field values: nvlink xmit+rcv bytes, all links": (
                pynvml.nvmlDeviceGetFieldValues,
                h,
                [(field, ALL_LINKS) for field in NVLINK_BYTE_COUNTERS],
            ),
            "field values: pcie tx+rx byte counters": (
                pynvml.nvmlDeviceGetFieldValues,
                h,
                pcie_counters,
            ),
        }
        for name, (call, *args) in calls.items():
            wall, user, system, error = cost(call, *args)
            note = f"  ({error})" if error else ""
            print(f"{name:<44} {index:>3} {wall:>8.2f} {user:>8.2f} {system:>8.2f}{note}")
        if index == 0:
            for what, fields in (
                ("pcie byte counters", pcie_counters),
                ("nvlink byte counters, all links", [(f, ALL_LINKS) for f in NVLINK_BYTE_COUNTERS]),
                ("nvlink byte counters, link 0", [(f, 0) for f in NVLINK_BYTE_COUNTERS]),
            ):
                values = pynvml.nvmlDeviceGetFieldValues(h, fields)
                print(what, [(v.fieldId, v.nvmlReturn, v.value.ullVal) for v in values])
    if "--validate" in sys.argv:
        validate()
    cpu = ProcessCpu("sglang", "")
    wall, user, system, _ = cost(cpu.read)
    processes = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    print(f"{'process CPU scan of /proc':<44} {'-':>3} {wall:>8.2f} {user:>8.2f} {system:>8.2f}")
    print(f"processes on the machine: {processes}")
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
