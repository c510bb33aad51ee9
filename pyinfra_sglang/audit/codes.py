"""Every finding code pyinfra-sglang emits, the levels it is emitted at and what it means: the
audit (deploy/audit.py), ``pyinfra-sglang analyze`` (a subset of the audit's checks) and the
bottleneck diagnosis (deploy/bench.py, ``pyinfra-sglang diagnose``).

Codes are stable kebab-case strings that users grep and alert on; renaming one is a breaking
change. docs/audit.md holds ``codes_markdown()`` between its ``finding-codes`` markers, and
tests/unit/test_reference_docs.py fails when a code is emitted but not listed here, listed but
never emitted, or the table in the docs differs.
"""

from __future__ import annotations

from typing import NamedTuple

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import LEVELS, Level


class Code(NamedTuple):
    levels: tuple[Level, ...]
    # May name thresholds of data/diagnosis.toml as {placeholders}: see _thresholds().
    meaning: str


CODES: dict[str, Code] = {
    # --- audit: the NVIDIA driver ----------------------------------------------------------
    "driver": Code(
        ("ok",), "the loaded kernel module is on the inventory's driver branch and flavor"
    ),
    "driver-missing": Code(("fail",), "no NVIDIA kernel module loaded and no GPU visible"),
    "no-nvidia-gpu": Code(
        ("fail",),
        "no NVIDIA GPU on the machine's PCI bus (a container or a machine without one): every "
        "other check is skipped, and the finding lists them",
    ),
    "driver-drift": Code(
        ("fail",),
        "the loaded module is not on the inventory's branch, is the wrong flavor, or does not "
        "match the userspace driver; or a module is loaded but nvidia-smi finds no GPU, or "
        "GPUs are seen but `/proc/driver/nvidia/version` is missing",
    ),
    "driver-reboot-required": Code(
        ("warn",),
        "the installed kernel module package is not the loaded one, or `/run/reboot-required` "
        "exists",
    ),
    "driver-support": Code(
        ("ok", "warn"),
        "the pinned (or running) driver branch against NVIDIA's support on the audit's date: "
        "a new-feature branch, one off NVIDIA's matrix or past its end warns, naming the "
        "supported ones (data/nvidia.toml `branch_support`)",
    ),
    "driver-toolkit": Code(
        ("ok", "warn", "fail"),
        "the loaded driver against the installed CUDA toolkit's minimum (CUDA release notes, "
        "Table 3): below it but on the major's minor-version compatibility floor warns, below "
        "that fails",
    ),
    "driver-update-available": Code(
        ("warn",),
        "apt offers a newer release of the pinned branch than the installed one "
        "(`nvidia_driver_update_within_branch` moves to it)",
    ),
    "secure-boot-unsigned-module": Code(
        ("fail",),
        "Secure Boot is on and the nvidia module for the running kernel is not signed (or "
        "not built): the kernel rejects it",
    ),
    "dkms-module": Code(
        ("ok",), "DKMS built the installed NVIDIA module for the newest installed kernel"
    ),
    "dkms-module-missing": Code(
        ("warn",),
        "the newest installed kernel (the one that boots next) has no NVIDIA module built by "
        "DKMS: usually its headers are missing",
    ),
    "fabric-manager": Code(
        ("ok", "warn", "fail"),
        "NVSwitch boards: NVIDIA Fabric Manager's service and its package's release against the "
        "loaded driver's, and every GPU's fabric state (`nvidia-smi -q` Fabric: Completed, "
        "Success); fails when Fabric Manager is needed here and down or at another release, "
        "or the fabric is not registered; a VM whose hypervisor manages the fabric passes when "
        "it is registered; ok on a board with no NVSwitch fabric (State N/A or Not Supported); "
        "warns (analyze) when a GPU's fabric state could not be read",
    ),
    "cuda-init": Code(
        ("ok", "fail"),
        "CUDA initializes: cuInit(0) through libcuda.so.1 with the venv's python (802: the "
        'NVLink fabric is not ready); ok with "not probed: ..." where there is no python or '
        "no loadable libcuda.so.1",
    ),
    # --- audit: GPU health (audit/health.py; data/gpu_health.toml) ---------------------------
    "gpu-health": Code(
        ("ok",),
        "what was read of the GPUs' health, all clean, saying how much was read: no Xid in the "
        "kernel log read (its source, from when, how many lines), no uncorrectable ECC "
        "error on the GPUs whose counters were read (N of M), no pending or failed row "
        "remapping or retired page, NVLink error counters 0, clocks not held down by the "
        "hardware under load",
    ),
    "gpu-health-unread": Code(
        ("warn",),
        "a GPU health reading that could not be made, naming what and why: a GPU whose "
        "uncorrectable ECC counters were not read (ECC disabled, every counter N/A, or a "
        "capture without the ECC section), or an `nvidia-smi -q` read with no GPU in it; "
        "never an ok about it",
    ),
    "gpu-xid": Code(
        ("warn", "fail"),
        "an Xid in the kernel log of this boot, per GPU (its PCI address) and Xid, with the "
        "meaning and action of NVIDIA's Xid catalogue (data/gpu_health.toml): fail for the "
        "fatal ones (48, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143, 149, 154, 155), warn for "
        "the others and for an Xid not in the catalogue subset",
    ),
    "ecc-uncorrectable": Code(
        ("warn", "fail"),
        "uncorrectable ECC errors (`nvidia-smi -q` DRAM/SRAM Uncorrectable): fail since the "
        "driver loaded (drain and reset), warn for lifetime counts only",
    ),
    "row-remap-pending": Code(
        ("warn",),
        "a row remapping waits for a GPU reset (Remapped Rows Pending: Yes): drain and reset",
    ),
    "row-remap-failed": Code(
        ("fail",), "row remapping failed (Remapping Failure Occurred: Yes): replace the GPU"
    ),
    "retired-pages": Code(
        ("warn",),
        "memory pages retired for ECC errors, or pages waiting to be retired (Pending Page "
        "Blacklist: Yes: drain and reset)",
    ),
    "clock-throttled": Code(
        ("warn",),
        "clocks held down by the hardware (HW slowdown, HW thermal, HW power brake, SW "
        "thermal) in at least 20% of the samples taken under the audit's load; idle, the "
        "applications clocks and the software power cap are not a finding",
    ),
    "nvlink-errors": Code(
        ("warn",),
        "NVLink CRC, replay or recovery error counters not 0 (`nvidia-smi nvlink -e`)",
    ),
    "dcgm-diag": Code(
        ("ok", "warn", "fail"),
        "`dcgmi diag -r <audit_dcgm_level>` where dcgmi is on PATH: fail per test with a Fail "
        "result (Failed, FAIL and Error too, in any case), warn per Warn result, per result "
        "word it does not know, when no result was read, and when dcgmi did not exit 0 (124: "
        "cut off by the audit's timeout; the tests not reached never ran); ok when it exited "
        '0 and every test passed; ok with "not run" where dcgmi is absent (no DCGM is not a '
        "problem)",
    ),
    # --- audit: the model's weights ----------------------------------------------------------
    "model": Code(("ok",), "the model's snapshot (or local path) is on the host, whole"),
    "model-missing": Code(
        ("fail",),
        "no snapshot of the inventory's revision in the Hub cache, or a local model path "
        "without config.json",
    ),
    "model-incomplete": Code(
        ("fail",), "snapshot files without their data, or cut-off downloads, in the Hub cache"
    ),
    "model-revision-drift": Code(
        ("warn",),
        "the branch or tag the inventory names stands for another commit on the Hub now than "
        "the one the host has",
    ),
    # --- audit: CUDA, GPUs, links ------------------------------------------------------------
    "cuda": Code(("ok",), "nvcc of the inventory's CUDA release at its path"),
    "cuda-drift": Code(
        ("fail",), "no nvcc at the inventory's CUDA path, or it reports another release"
    ),
    "gpu-count": Code(("ok",), "nvidia-smi's GPU count (as `expected_gpu_count`, when set)"),
    "gpu-count-mismatch": Code(
        ("fail",), "nvidia-smi's GPU count differs from `expected_gpu_count`"
    ),
    "gpu-model-mismatch": Code(
        ("fail",), "a GPU nvidia-smi sees is not the model `expected_gpu_model` names"
    ),
    "persistence-mode": Code(("ok",), "persistence mode on for every GPU"),
    "persistence-mode-off": Code(("warn",), "a GPU without persistence mode"),
    "persistence-mode-unknown": Code(
        ("warn",),
        "a GPU whose persistence mode was not read (no `persistence_mode` column, or N/A): "
        "not counted as on",
    ),
    "pcie-links": Code(
        ("ok",), "every GPU's PCIe link at its maximum width and generation (says how read)"
    ),
    "pcie-link-unknown": Code(
        ("warn",),
        "a GPU whose PCIe link generation or width (current or maximum) was not read (no such "
        "column, or N/A, [N/A], ERR!): that part of the link is not judged",
    ),
    "pcie-width-degraded": Code(("fail",), "a PCIe link narrower than its maximum (x8 of x16)"),
    "pcie-gen-below-max": Code(
        ("fail", "warn"),
        "a PCIe link below its maximum generation: fail when read under load, warn when read "
        "idle (idle links drop their speed)",
    ),
    "topology": Code(("ok",), "every GPU pair joined by NVLink, or a single GPU"),
    "topology-pcie-only": Code(
        ("warn",), "tensor parallelism over GPUs some of which share no NVLink"
    ),
    "topology-cross-numa": Code(("warn",), "GPU pairs across NUMA nodes (`SYS`)"),
    "topology-unknown": Code(("warn",), "several GPUs but no `nvidia-smi topo -m` matrix"),
    "p2p": Code(("ok",), "P2P reads `OK` between every GPU pair"),
    "p2p-unavailable": Code(
        ("warn",),
        "a GPU pair without P2P reads (`nvidia-smi topo -p2p r` not `OK`), or no such matrix",
    ),
    "iommu-translation": Code(("warn",), "IOMMU on without `iommu=pt`, several GPUs, bare metal"),
    "pcie-acs": Code(("ok",), "no ACS redirect on the PCIe bridges above the GPUs"),
    "pcie-acs-redirect": Code(
        ("fail", "warn"),
        "PCIe ACS redirects peer traffic (`ReqRedir+`/`CmpltRedir+` in `lspci -vvv`) on a bridge "
        "above the GPUs: fail where the service forces P2P through the CPU "
        "(`NCCL_P2P_LEVEL=PHB`/`SYS`; NCCL hangs), warn otherwise (P2P off costs bandwidth; "
        "NCCL's default still uses P2P behind one switch)",
    ),
    "pcie-acs-unknown": Code(
        ("warn",),
        "ACS above the GPUs not read: no lspci, no GPU in sysfs, or lspci run without root "
        "(`Capabilities: <access denied>`)",
    ),
    # --- audit: SGLang -----------------------------------------------------------------------
    "flash-attn": Code(
        ("ok",),
        "the venv's flash-attn (the pinned version) was built for every GPU architecture found, "
        "or for exactly `flash_attn_cuda_archs`",
    ),
    "flash-attn-off": Code(
        ("ok", "warn"),
        "flash-attn is not built here (the profile does not need it on these GPUs, or "
        "`flash_attn_build` is false; the finding says which): none in the venv is ok, and one "
        "found anyway is reported; warn when its build record lacks a GPU architecture found "
        "or names none",
    ),
    "flash-attn-arch-mismatch": Code(
        ("fail",),
        "the venv's flash-attn was built without kernels for a GPU architecture found (a GPU "
        'upgrade: "no kernel image is available" at run time; the next deploy rebuilds it), '
        "for other architectures than `flash_attn_cuda_archs`, or its build record names none; "
        "or `flash_attn_cuda_archs` itself lacks a GPU architecture found",
    ),
    "sglang-version": Code(("ok",), "the venv's SGLang is the pinned release"),
    "sglang-version-drift": Code(("fail",), "the venv's SGLang is not the pinned release"),
    "service": Code(("ok",), "the unit is active/running"),
    "service-down": Code(
        ("fail",),
        "`sglang.service` (and `sglang-router.service` when `sglang_router_worker_urls` is "
        "set) missing or not active/running, or stopped by its start limit after a crash loop",
    ),
    "unit": Code(("ok",), "the service files on the host are what the inventory renders"),
    "unit-drift": Code(
        ("fail", "warn"),
        "fail: the service files on the host are not what the inventory renders (digests; "
        "contents never shown); warn: the expected files cannot be rendered (e.g. a secret "
        "file missing on the controller)",
    ),
    "decode-sanity": Code(
        ("ok", "warn", "fail"),
        "the decode prompt: ok with TTFT and tokens/s; warn when not run (the unit is "
        "installed but not running); fail when it failed (refused, loading, timeout, wrong, "
        "empty or degenerate answer)",
    ),
    # --- audit: the monitoring server (monitoring_role: server; audit/monitoring.py) ---------
    "monitoring": Code(
        ("ok", "warn", "fail"),
        "on the monitoring host, each target Prometheus scrapes, from its /api/v1/targets: "
        "ok when all are up, warn naming those down (with Prometheus's error) or when it "
        "scrapes none, fail when Prometheus does not answer",
    ),
    # --- audit: the watchdog (sglang_watchdog: true; audit/watchdog.py) ----------------------
    "watchdog": Code(
        ("ok", "warn"),
        "the watchdog's timer runs, with its last decode check and the failures in a row from "
        "its state file; warn when the timer is not active or enabled, or the last check failed",
    ),
    "multinode-network": Code(
        ("ok", "warn", "fail"),
        "a multi-node member's group network, read from sysfs: the interface the group's "
        "traffic leaves by (fail when it is not up) and the RDMA ports (warn when none is "
        "active: NCCL then runs over sockets), with nvidia_peermem, and each GPU's path to its "
        "nearest active RDMA NIC in `nvidia-smi topo -m` (warn naming the GPUs with none "
        "through PCIe switches alone, or when the paths could not be read); only where the "
        "interface is known",
    ),
    "watchdog-restarts": Code(
        ("ok", "warn", "fail"),
        "the watchdog's last restarts of the server (times, why, how each ended): warn when "
        "one was within the hour before its last check; fail when it reached "
        "`sglang_watchdog_max_restarts_per_hour` and holds off while the server still fails, "
        "or the server did not come back after its last restart",
    ),
    # --- audit: measured bandwidth (audit_link_probe: true) ---------------------------------
    "pcie-bandwidth": Code(
        ("ok",), "host<->GPU copies at or above {low_fraction} of the link's rate"
    ),
    "pcie-bandwidth-low": Code(
        ("warn",), "host<->GPU copies under {low_fraction} of the link's rate"
    ),
    "peer-bandwidth": Code(("ok",), "GPU->GPU copy bandwidth per pair, against NVLink's rate"),
    "allreduce-bandwidth": Code(("ok",), "NCCL all-reduce bus bandwidth at 1, 16 and 256 MiB"),
    "p2p-probe-hang": Code(
        ("fail", "warn"),
        "the link probe's GPU->GPU copy or NCCL all-reduce test ran past its deadline and was "
        "killed (peer traffic hangs): fail unless the service already runs with "
        "`NCCL_P2P_DISABLE=1`",
    ),
    "link-probe-failed": Code(
        ("warn",),
        "the link probe failed (often GPU memory held by the service); links were not measured",
    ),
    # --- diagnosis of a benchmark ------------------------------------------------------------
    "interconnect-bound": Code(
        ("warn",),
        "diagnosis: a PCIe or NVLink direction at >= {saturated_fraction} of the link's rate in "
        "at least {saturated_share} of the samples, or both directions added while the GPU "
        "computes nothing (copies taking turns)",
    ),
    "interconnect-estimate": Code(
        ("ok", "warn"),
        "diagnosis, with a named profile: what the served TP/EP/DP-attention layout moves per "
        "token by the estimate (parallelism.py), times the best measured rate, as a share of "
        "the link's bandwidth (warn at >= {saturated_fraction}), and the layout that fits and "
        "would move the least",
    ),
    "memory-bandwidth-bound": Code(
        ("ok",),
        "diagnosis: the GPU is busy streaming its own memory: memory utilization >= "
        "{hbm_mem_util_pct} with the SM clock at its max (not throttled); with the model's "
        "profile, the decode roofline's share reached",
    ),
    "compute-bound": Code(
        ("ok",),
        "diagnosis: the GPU is busy with power at >= {compute_power_fraction} of its limit or "
        "the SM clock pulled down, and memory utilization a copy does not reach",
    ),
    "host-bound": Code(
        ("warn",),
        "diagnosis: load ran but the GPUs and links were mostly idle; the server's CPU use "
        "tells launch-bound from waiting",
    ),
    "memory-capacity-bound": Code(
        ("warn",),
        "diagnosis: the KV cache near full with requests queued (judged on the whole run "
        "where the server's numbers carry no times)",
    ),
    "admission-capped": Code(
        ("warn",),
        "diagnosis: in a step, requests queued while the running ones sat at the server's "
        "max_running_requests with room in the KV cache (below {kv_full} full)",
    ),
    "kv-capacity-bound": Code(
        ("warn",),
        "diagnosis: in a step, the KV cache at {kv_full} or more with requests queued, or "
        "requests retracted",
    ),
    "prefix-cached": Code(
        ("warn",),
        "diagnosis: more than {cached_share} of a step's prompt tokens came from the prefix "
        "cache: TTFT and input throughput measured cache hits",
    ),
    "prefill-faster-than-compute": Code(
        ("warn",),
        "diagnosis: a step's median TTFT below the time the GPUs need to compute its prompt "
        "at their dense bf16 rate (data/gpus.toml)",
    ),
    "idle": Code(
        ("warn",),
        "diagnosis: nothing ran while sampling, or a GPU idled while others worked",
    ),
    "undetermined": Code(
        ("warn",), "diagnosis: busy or moving data, without evidence for either limit"
    ),
}


def _thresholds() -> dict[str, str]:
    """The thresholds meanings name, as data/diagnosis.toml sets them."""
    t = data.diagnosis()
    return {
        "low_fraction": f"{t.bandwidth.low_fraction:.0%}",
        "saturated_fraction": f"{t.link.saturated_fraction:.0%}",
        "saturated_share": f"{t.link.share:.0%}",
        "hbm_mem_util_pct": f"{t.memory_bandwidth.mem_util_pct}%",
        "compute_power_fraction": f"{t.compute.min_power_fraction:.0%}",
        "kv_full": f"{t.server.kv_full:.0%}",
        "cached_share": f"{t.server.cached_share:.0%}",
    }


def _levels_text(levels: tuple[Level, ...]) -> str:
    # Most severe first, as the audit's table orders findings.
    return ", ".join(sorted(levels, key=LEVELS.index, reverse=True))


def codes_markdown() -> str:
    """The finding code table in docs/audit.md, sorted by code."""
    thresholds = _thresholds()
    rows = ["| code | level | meaning |", "| --- | --- | --- |"]
    for name in sorted(CODES):
        code = CODES[name]
        meaning = code.meaning.format(**thresholds)
        rows.append(f"| `{name}` | {_levels_text(code.levels)} | {meaning} |")
    return "\n".join(rows) + "\n"
