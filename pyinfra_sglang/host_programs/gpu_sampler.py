#!/usr/bin/env python3
"""Sample every GPU's load and the SGLang server's CPU use at a fixed interval, as JSON lines.

Shipped to a GPU host and run with the SGLang venv's Python: it needs only the standard library
and pynvml (nvidia-ml-py). It only reads (NVML queries, /proc), so it has no effect on the
server, and it stops after ``--duration`` seconds (or on SIGTERM/SIGINT) whatever happens.

    python gpu_sampler.py --duration 60 --interval 0.2 [--cpu-pattern sglang] [--output F]

One line per sample time (``t``: seconds since start; ``time``: Unix time):

    {"t": 0.2, "time": 1796006039.9,
     "gpus": [{"index": 0, "name": "NVIDIA H200", "gpu_util": 100, "mem_util": 23,
               "pcie_tx_kbps": 7292, "pcie_rx_kbps": 5425, "pcie_gen": 5, "pcie_width": 16,
               "pcie_gen_max": 5, "pcie_width_max": 16, "sm_clock_mhz": 1500,
               "sm_clock_max_mhz": 1980, "power_w": 280.6, "power_limit_w": 700.0,
               "memory_used_mib": 81234,
               "nvlink_links": 18,
               "nvlink_raw": {"NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": 123, ...}}],
     "cpu": {"processes": 9, "percent": 104.5, "max_process_percent": 98.0}}

A reading the GPU or driver does not offer is null (the first failure of each is reported on
stderr). ``nvlink_raw`` holds NVML's NVLink throughput counters summed over the active links,
as read: cumulative counters whose unit NVML documents as KiB; a rate is the difference between
the samples that hold them. They are read every ``--nvlink-interval`` seconds (1 by default;
``nvlink_raw`` is null in the samples between): on an H200 each read costs ~28 ms of system
CPU, which at every 0.1 s sample took 75% of a core on two GPUs and stretched the interval to
0.19 s (tests/fixtures/gpu/h200x2-tp-dp-sampler). ``cpu`` is the CPU time of processes
whose command line matches ``--cpu-pattern`` and of their children, in percent of one core
over the last interval (the sampler itself and what ``--cpu-exclude`` matches are left out).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pynvml

# NVLink counters read per link (names as in pynvml; both are cumulative, in KiB per NVML).
NVLINK_COUNTERS = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
# Links to probe; older pynvml releases lack the constant (18: Hopper's link count).
NVLINK_MAX_LINKS = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
# The benchmark client and this sampler run from the same venv, so they match "sglang" too.
# The benchmark client, the sampler itself, and deploy/bench.py's script and metrics poller
# (their folder is named pyinfra-sglang-bench.*): load that is not the server's.
DEFAULT_CPU_EXCLUDE = (
    r"bench_serving|sglang\.benchmark|bench_driver|gpu_sampler|pyinfra-sglang-bench"
)

# An optional reading may fail as NVML errors ("Not Supported" in VMs, on MIG) or as binding
# mismatches between pynvml and the driver (the real H200 VM's P2P query raised a ctypes
# ArgumentError): either way the reading is null and sampling goes on.
READ_ERRORS = (pynvml.NVMLError, ctypes.ArgumentError, TypeError)


class GpuReader:
    """Reads one GPU; remembers which readings failed so each is reported once."""

    def __init__(self, index: int):
        self.index = index
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self._reported: set[str] = set()
        name = self.optional("name", pynvml.nvmlDeviceGetName, self.handle)
        self.static = {
            "name": name.decode() if isinstance(name, bytes) else name,
            "pcie_gen_max": self.optional(
                "pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration, self.handle
            ),
            "pcie_width_max": self.optional(
                "pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth, self.handle
            ),
            "sm_clock_max_mhz": self.optional(
                "sm_clock_max_mhz",
                pynvml.nvmlDeviceGetMaxClockInfo,
                self.handle,
                pynvml.NVML_CLOCK_SM,
            ),
            "power_limit_w": _milli(
                self.optional("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, self.handle)
            ),
        }
        self.nvlinks = self._active_nvlinks()
        self.nvlink_names = {getattr(pynvml, n): n for n in NVLINK_COUNTERS if hasattr(pynvml, n)}
        self.nvlink_fields = [(field, link) for field in self.nvlink_names for link in self.nvlinks]

    def optional(self, what: str, call, *args):
        try:
            return call(*args)
        except READ_ERRORS as error:
            if what not in self._reported:
                self._reported.add(what)
                # One write per line: readers run in threads and must not interleave.
                sys.stderr.write(f"gpu {self.index}: {what} unavailable: {error}\n")
            return None

    def _active_nvlinks(self) -> list[int]:
        links = []
        for link in range(NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(self.handle, link) == 1:
                    links.append(link)
            except READ_ERRORS:
                # Past the GPU's last link, or no NVLink at all: NVML answers with an error.
                break
        return links

    def pcie_rx(self):
        return self.optional(
            "pcie_rx",
            pynvml.nvmlDeviceGetPcieThroughput,
            self.handle,
            pynvml.NVML_PCIE_UTIL_RX_BYTES,
        )

    def read(self, pool: ThreadPoolExecutor, with_nvlink: bool = True) -> dict:
        h = self.handle
        # Each throughput call blocks ~21 ms while NVML samples the link (it sleeps: ~1 ms of
        # CPU): RX in another thread while this one reads TX and the rest.
        rx = pool.submit(self.pcie_rx)
        util = self.optional("utilization", pynvml.nvmlDeviceGetUtilizationRates, h)
        memory = self.optional("memory", pynvml.nvmlDeviceGetMemoryInfo, h)
        record = {
            "index": self.index,
            "name": self.static["name"],
            "gpu_util": util.gpu if util is not None else None,
            "mem_util": util.memory if util is not None else None,
            "pcie_tx_kbps": self.optional(
                "pcie_tx", pynvml.nvmlDeviceGetPcieThroughput, h, pynvml.NVML_PCIE_UTIL_TX_BYTES
            ),
            "pcie_rx_kbps": None,
            # The current generation drops when idle: read it at every sample, under load too.
            "pcie_gen": self.optional("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
            "pcie_width": self.optional("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            "pcie_gen_max": self.static["pcie_gen_max"],
            "pcie_width_max": self.static["pcie_width_max"],
            "sm_clock_mhz": self.optional(
                "sm_clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM
            ),
            "sm_clock_max_mhz": self.static["sm_clock_max_mhz"],
            "power_w": _milli(self.optional("power", pynvml.nvmlDeviceGetPowerUsage, h)),
            "power_limit_w": self.static["power_limit_w"],
            "memory_used_mib": memory.used // 2**20 if memory is not None else None,
        }
        if self.nvlink_fields:
            record["nvlink_links"] = len(self.nvlinks)
            # The counters are cumulative: read less often, their rate is as exact, averaged
            # over longer (null in between).
            record["nvlink_raw"] = self._nvlink_counters() if with_nvlink else None
        record["pcie_rx_kbps"] = rx.result()
        return record

    def _nvlink_counters(self) -> dict[str, int | None]:
        values = self.optional(
            "nvlink_throughput", pynvml.nvmlDeviceGetFieldValues, self.handle, self.nvlink_fields
        )
        totals: dict[str, int | None] = dict.fromkeys(NVLINK_COUNTERS)
        for value in values or ():
            if value.nvmlReturn != pynvml.NVML_SUCCESS:
                continue
            name = self.nvlink_names[value.fieldId]
            totals[name] = (totals[name] or 0) + _field_number(value)
        return totals


def _milli(value):
    return None if value is None else round(value / 1000, 3)


def _field_number(value) -> int | float:
    """The number in an nvmlFieldValue_t, from the union member its valueType names."""
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    }.get(value.valueType, "ullVal")
    return getattr(value.value, member)


class ProcessCpu:
    """CPU time of the processes whose command line matches a pattern, and of their children
    (workers a server starts may carry another name), from /proc."""

    def __init__(self, pattern: str, exclude: str, proc: str = "/proc"):
        self.pattern = re.compile(pattern)
        self.exclude = re.compile(exclude) if exclude else None
        self.proc = proc
        self.ticks_per_s = os.sysconf("SC_CLK_TCK")
        self.last = self._ticks()
        self.last_time = time.monotonic()

    def _processes(self) -> dict[int, tuple[int, int, str]]:
        """pid -> (parent pid, CPU ticks, command line) of every process but this one."""
        found = {}
        for entry in os.listdir(self.proc):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"{self.proc}/{entry}/cmdline", "rb") as file:
                    cmdline = file.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"{self.proc}/{entry}/stat") as file:
                    stat = file.read()
            except OSError:
                continue  # the process ended between listing and reading
            # Fields after the command name (which may hold spaces and parentheses):
            # state is field 3, the parent pid 4, utime 14 and stime 15.
            fields = stat[stat.rindex(")") + 2 :].split()
            found[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), cmdline)
        return found

    def _ticks(self) -> dict[int, int]:
        processes = self._processes()

        def wanted(pid: int) -> bool:
            return not (self.exclude and self.exclude.search(processes[pid][2]))

        chosen = {pid for pid, (_, _, cmd) in processes.items() if self.pattern.search(cmd)}
        chosen = {pid for pid in chosen if wanted(pid)}
        grew = True
        while grew:  # add children of chosen processes until no more are found
            children = {
                pid
                for pid, (parent, _, _) in processes.items()
                if parent in chosen and pid not in chosen and wanted(pid)
            }
            chosen |= children
            grew = bool(children)
        return {pid: processes[pid][1] for pid in chosen}

    def read(self) -> dict:
        now, ticks = time.monotonic(), self._ticks()
        elapsed = max(now - self.last_time, 1e-6)
        # Processes seen at both readings only: a new one's first delta is unknown.
        per_process = [
            (ticks[pid] - self.last[pid]) / self.ticks_per_s / elapsed * 100
            for pid in ticks
            if pid in self.last
        ]
        self.last, self.last_time = ticks, now
        return {
            "processes": len(ticks),
            "percent": round(sum(per_process), 1),
            "max_process_percent": round(max(per_process, default=0.0), 1),
        }


def sample(args: argparse.Namespace, out) -> int:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    pynvml.nvmlInit()
    try:
        readers = [GpuReader(i) for i in range(pynvml.nvmlDeviceGetCount())]
        cpu = ProcessCpu(args.cpu_pattern, args.cpu_exclude)
        start = time.monotonic()
        # Two threads per GPU: the PCIe throughput calls block ~21 ms each (TX and RX side by
        # side), and NVML is thread-safe. The NVLink counters cost ~0.8 ms of system CPU per
        # link and direction (28 ms a sample on an H200's 18 links: bench/nvml_call_cost.py),
        # so they are read every --nvlink-interval seconds, not at every sample.
        with ThreadPoolExecutor(max_workers=max(2 * len(readers), 1)) as pool:
            tick = 1
            nvlink_due = 0.0
            while True:
                due = start + tick * args.interval
                if due - start > args.duration + 1e-9:
                    break  # bounded: the last sample is due at --duration at the latest
                if stop.wait(max(due - time.monotonic(), 0)):
                    break  # SIGTERM or SIGINT
                t = time.monotonic() - start
                # Due within half an interval counts as due: sample times jitter.
                with_nvlink = t + args.interval / 2 >= nvlink_due
                if with_nvlink:
                    nvlink_due = t + args.nvlink_interval
                reads = [pool.submit(reader.read, pool, with_nvlink) for reader in readers]
                gpus = [read.result() for read in reads]
                # Wall-clock time too, to line samples up with the benchmark's own log.
                line = {
                    "t": round(t, 3),
                    "time": round(time.time(), 3),
                    "gpus": gpus,
                    "cpu": cpu.read(),
                }
                out.write(json.dumps(line) + "\n")
                out.flush()
                # A late sample skips the ticks it missed instead of bunching up behind them.
                tick = max(tick + 1, int((time.monotonic() - start) / args.interval) + 1)
    finally:
        pynvml.nvmlShutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to sample")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples")
    parser.add_argument(
        "--nvlink-interval",
        type=float,
        default=1.0,
        help="seconds between readings of the NVLink counters (costly in system CPU)",
    )
    parser.add_argument("--cpu-pattern", default="sglang", help="regex on process command lines")
    parser.add_argument("--cpu-exclude", default=DEFAULT_CPU_EXCLUDE, help="regex to leave out")
    parser.add_argument("--output", help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.duration <= 0:
        parser.error("--interval and --duration must be positive")
    if args.output:
        with open(args.output, "w") as out:
            return sample(args, out)
    try:
        return sample(args, sys.stdout)
    except BrokenPipeError:
        # The reader went away (`| head`); point stdout at /dev/null so the exit flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
