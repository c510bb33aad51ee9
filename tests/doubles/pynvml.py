"""Test double of pynvml (nvidia-ml-py), for tests only: no GPU exists where tests run.

Put ``tests/doubles`` first on PYTHONPATH and ``import pynvml`` finds this module. It has the
real module's function and constant names (a unit test checks them against nvidia-ml-py) and
replays the 2x H200 captures in tests/fixtures/gpu/h200x2-nvlink-vm/:

- nvml.json: GPU names, PCIe generation/width (current and max), NVLink state per link;
- samples.json: per sample and GPU [gpu_util %, mem_util %, pcie_tx KB/s, pcie_rx KB/s,
  sm_clock MHz, power mW]. The k-th call of a getter on a GPU returns sample k (wrapping), so
  the k-th sample a sampler takes is the capture's k-th row whatever order it reads in;
- smi_q.txt: enforced power limit, max SM clock, memory used.

NVLink throughput counters were not captured: ``nvmlDeviceGetFieldValues`` returns synthetic
cumulative counters (link L, k-th call: TX k*1024, RX k*512) so code paths can be exercised.
``nvmlDeviceGetPcieThroughput`` sleeps 20 ms, as the real call blocks while it samples.

``PYNVML_DOUBLE_FAIL="nvmlDeviceGetPowerUsage,nvmlDeviceGetFieldValues:argerror"`` makes those
functions raise NVMLError "Not Supported" (or ctypes.ArgumentError with ``:argerror``, as the
real VM's P2P query did).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200x2-nvlink-vm"

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_CLOCK_SM = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_FEATURE_ENABLED = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


_lock = threading.Lock()
_state: dict = {}


def _failing() -> dict[str, str]:
    spec = os.environ.get("PYNVML_DOUBLE_FAIL", "")
    return dict((item.split(":") + ["notsupported"])[:2] for item in spec.split(",") if item)


def _replayed(function):
    """Refuses calls before nvmlInit, and raises where PYNVML_DOUBLE_FAIL asks."""

    @functools.wraps(function)
    def wrapper(*args):
        if not _state:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        how = _failing().get(function.__name__)
        if how == "argerror":
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter")
        if how:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return function(*args)

    return wrapper


def _smi_q_values() -> list[dict]:
    text = (CAPTURE / "smi_q.txt").read_text()
    blocks = re.split(r"\nGPU [0-9A-F]{8}:", text)[1:]
    power_limit = r"Current Power Limit\s+: ([\d.]+) W"
    sm_clock_max = r"Max Clocks\n.*\n\s+SM\s+: (\d+) MHz"
    memory_used = r"FB Memory Usage\n(?:.*\n){2}\s+Used\s+: (\d+) MiB"
    return [
        {
            "power_limit_mw": round(float(re.search(power_limit, b)[1]) * 1000),
            "sm_clock_max": int(re.search(sm_clock_max, b)[1]),
            "memory_used_mib": int(re.search(memory_used, b)[1]),
        }
        for b in blocks
    ]


def nvmlInit() -> None:
    with _lock:
        _state["gpus"] = json.loads((CAPTURE / "nvml.json").read_text())["gpus"]
        _state["rows"] = json.loads((CAPTURE / "samples.json").read_text())
        _state["smi_q"] = _smi_q_values()
        _state["calls"] = {}


def nvmlShutdown() -> None:
    with _lock:
        _state.clear()


def _call_count(handle, what: str) -> int:
    """How many times ``what`` was called on this GPU before this call."""
    with _lock:
        k = _state["calls"].get((handle.index, what), 0)
        _state["calls"][(handle.index, what)] = k + 1
    return k


def _next_row(handle, what: str) -> list:
    """Sample k (wrapping) for the k-th call of ``what`` on this GPU."""
    rows = _state["rows"]
    return rows[_call_count(handle, what) % len(rows)][str(handle.index)]


@_replayed
def nvmlDeviceGetCount() -> int:
    return len(_state["gpus"])


@_replayed
def nvmlDeviceGetHandleByIndex(index: int):
    if not 0 <= index < len(_state["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return SimpleNamespace(index=index)


@_replayed
def nvmlDeviceGetName(handle) -> str:
    return _state["gpus"][handle.index]["name"]


@_replayed
def nvmlDeviceGetUtilizationRates(handle):
    row = _next_row(handle, "utilization")
    return SimpleNamespace(gpu=row[0], memory=row[1])


@_replayed
def nvmlDeviceGetPcieThroughput(handle, counter: int) -> int:
    time.sleep(0.02)
    row = _next_row(handle, f"pcie{counter}")
    return row[2] if counter == NVML_PCIE_UTIL_TX_BYTES else row[3]


@_replayed
def nvmlDeviceGetClockInfo(handle, clock: int) -> int:
    assert clock == NVML_CLOCK_SM, "the capture holds SM clocks only"
    return _next_row(handle, "sm_clock")[4]


@_replayed
def nvmlDeviceGetPowerUsage(handle) -> int:
    return _next_row(handle, "power")[5]


@_replayed
def nvmlDeviceGetMaxClockInfo(handle, clock: int) -> int:
    assert clock == NVML_CLOCK_SM, "the capture holds SM clocks only"
    return _state["smi_q"][handle.index]["sm_clock_max"]


@_replayed
def nvmlDeviceGetEnforcedPowerLimit(handle) -> int:
    return _state["smi_q"][handle.index]["power_limit_mw"]


@_replayed
def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(used=_state["smi_q"][handle.index]["memory_used_mib"] * 2**20)


@_replayed
def nvmlDeviceGetCurrPcieLinkGeneration(handle) -> int:
    return _state["gpus"][handle.index]["pcie_gen_cur"]


@_replayed
def nvmlDeviceGetCurrPcieLinkWidth(handle) -> int:
    return _state["gpus"][handle.index]["pcie_width_cur"]


@_replayed
def nvmlDeviceGetMaxPcieLinkGeneration(handle) -> int:
    return _state["gpus"][handle.index]["pcie_gen_max"]


@_replayed
def nvmlDeviceGetMaxPcieLinkWidth(handle) -> int:
    return _state["gpus"][handle.index]["pcie_width_max"]


@_replayed
def nvmlDeviceGetNvLinkState(handle, link: int) -> int:
    links = _state["gpus"][handle.index]["nvlink"]
    if link >= len(links):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return links[link]["state"]


@_replayed
def nvmlDeviceGetFieldValues(handle, field_ids):
    k = _call_count(handle, "fields")
    per_link = {
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 1024,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 512,
    }
    values = []
    for field_id, scope_id in field_ids:
        known = field_id in per_link
        values.append(
            SimpleNamespace(
                fieldId=field_id,
                scopeId=scope_id,
                nvmlReturn=NVML_SUCCESS if known else NVML_ERROR_NOT_SUPPORTED,
                valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                value=SimpleNamespace(ullVal=k * per_link.get(field_id, 0)),
            )
        )
    return values
