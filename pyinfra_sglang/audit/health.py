"""GPU health: the kernel log's Xids, uncorrectable ECC errors, row remapping, retired pages,
NVLink error counters and clocks held down by the hardware under load -> findings. Pure: the
audit (judge.py) and ``analyze`` call the same functions. Xid meanings and actions come from
data/gpu_health.toml (NVIDIA's Xid catalogue, docs/sources.md).

Nothing here reports a fact that was not read as passing: a fact the audit could not read
(None) gives no finding, and ``gpu-health`` says only what was read.
"""

from __future__ import annotations

import re
from collections import Counter

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.parsers.gpu_health import XidEvent, pci_key

HEALTH_CODES = (
    "gpu-xid",
    "ecc-uncorrectable",
    "row-remap-pending",
    "row-remap-failed",
    "retired-pages",
    "clock-throttled",
    "nvlink-errors",
    "dcgm-diag",
)
_RECOVERY = re.compile(r"changed from .* to 0x[0-9A-Fa-f]+ \((?P<action>[^)]+)\)")


def _action(name: str, pci: str | None) -> str:
    text = data.gpu_health().actions[name]  # type: ignore[index]
    return text.replace("{pci}", pci or "<GPU>")


def gpu_number(text: object) -> int | None:
    """A GPU index as nvidia-smi, dcgmi and the kernel write it (a few ASCII digits), or None
    for anything else: int() would take "٣" or refuse a 5000-digit "index" with a traceback."""
    text = str(text).strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 4 else None


def _by_index(item: tuple) -> tuple:
    """Sort key for (index, ...) pairs: GPUs by number, anything unreadable last, by text."""
    number = gpu_number(item[0])
    return (number is None, number or 0, str(item[0]))


def _gpu_indexes(gpus: list[dict]) -> dict[str, int]:
    """PCI key -> nvidia-smi index of each GPU read (``pci.bus_id`` and ``index``)."""
    indexes = {}
    for position, gpu in enumerate(gpus):
        bus_id = gpu.get("pci.bus_id")
        if bus_id:
            index = gpu.get("index")
            number = gpu_number(index) if index else None
            indexes[pci_key(bus_id)] = position if number is None else number
    return indexes


def _bus_id(key: str) -> str:
    """The kernel's "0000:3b:00" as nvidia-smi names it, for `nvidia-smi -r -i`."""
    return f"0000{key}.0".upper()


def _solo(xid: int, events: list[XidEvent]) -> bool:
    """Is ``xid`` the only Xid read, on every GPU, with no line of it naming an earlier Xid
    as its cause ("caused by previous Xid 149")?"""
    return all(event["xid"] == xid and "previous Xid" not in event["detail"] for event in events)


def findings_for_xids(events: list[XidEvent], gpus: list[dict]) -> list[Finding]:
    """One finding per GPU and Xid in the kernel log, with the catalogue's meaning and what to
    do; fail for the fatal ones (data/gpu_health.toml ``level``), warn otherwise and for an
    Xid the catalogue subset does not list."""
    catalogue = {entry.code: entry for entry in data.gpu_health().xid}
    indexes = _gpu_indexes(gpus)
    counts = Counter((event["pci"], event["xid"]) for event in events)
    # The audit's read keeps 19 lines per GPU and Xid, then the last with the total seen.
    for event in events:
        total = event.get("total")
        if isinstance(total, int) and total > counts[(event["pci"], event["xid"])]:
            counts[(event["pci"], event["xid"])] = total
    last = {(event["pci"], event["xid"]): event["detail"] for event in events}
    findings = []
    for pci, xid in sorted(counts):
        detail = last[(pci, xid)]
        gpu = indexes.get(pci)
        where = f"GPU {gpu} ({pci})" if gpu is not None else f"the GPU at PCI {pci}"
        times = f"{counts[(pci, xid)]} time{'s' if counts[(pci, xid)] > 1 else ''}"
        entry = catalogue.get(xid)
        if entry is None:
            message = (
                f"{where}: Xid {xid} in the kernel log ({times}; last: {detail[:160]}). It is "
                "not in the audit's catalogue subset: look it up in NVIDIA's Xid catalogue "
                "(docs.nvidia.com/deploy/xid-errors)."
            )
            evidence = {"pci": pci, "xid": xid, "count": counts[(pci, xid)], "last": detail}
            findings.append(Finding("warn", "gpu-xid", message, gpu=gpu, evidence=evidence))
            continue
        action, level = entry.action, entry.level
        if entry.solo_action and _solo(xid, events):
            action = entry.solo_action
        recovery = _RECOVERY.search(detail) if xid == 154 else None
        if recovery and recovery["action"] in data.gpu_health().xid_154:
            action = data.gpu_health().xid_154[recovery["action"]]
            level = "warn" if action == "none" else "fail"
        shown = detail[:160].rstrip(".")
        message = (
            f"{where}: Xid {xid} in the kernel log ({times}): {entry.meaning} "
            f"({entry.mnemonic}; NVIDIA's action: {entry.nvidia}). Last: {shown}. "
            f"What to do: {_action(action, _bus_id(pci))}."
        )
        evidence = {
            "pci": pci,
            "xid": xid,
            "count": counts[(pci, xid)],
            "meaning": entry.meaning,
            "action": action,
            "last": detail,
        }
        findings.append(Finding(level, "gpu-xid", message, gpu=gpu, evidence=evidence))
    return findings


def _where(row: dict, position: int, indexes: dict[str, int]) -> tuple[int, str]:
    pci = row.get("pci")
    gpu = indexes.get(pci_key(pci), position) if pci else position
    return gpu, (f"GPU {gpu} ({pci})" if pci else f"GPU {gpu}")


def findings_for_memory(rows: list[dict], gpus: list[dict]) -> list[Finding]:
    """Uncorrectable ECC errors, pending or failed row remapping and retired pages, per GPU
    of ``nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`` (parse_health_q's rows)."""
    indexes = _gpu_indexes(gpus)
    findings = []
    for position, row in enumerate(rows):
        gpu, where = _where(row, position, indexes)
        pci = row.get("pci")
        volatile = (row["dram_uncorrectable_volatile"] or 0) + (
            row["sram_uncorrectable_volatile"] or 0
        )
        aggregate = (row["dram_uncorrectable_aggregate"] or 0) + (
            row["sram_uncorrectable_aggregate"] or 0
        )
        counts = {"volatile": volatile, "aggregate": aggregate}
        if volatile:
            message = (
                f"{where}: {volatile} uncorrectable ECC error(s) since the driver loaded "
                f"({aggregate} in its lifetime). What to do: {_action('drain-reset', pci)}; "
                "if they come back, replace the GPU."
            )
            findings.append(Finding("fail", "ecc-uncorrectable", message, gpu, counts))
        elif aggregate:
            message = (
                f"{where}: {aggregate} uncorrectable ECC error(s) in the GPU's lifetime, none "
                "since the driver loaded. Watch it: if the count grows, "
                f"{_action('replace', pci)}."
            )
            findings.append(Finding("warn", "ecc-uncorrectable", message, gpu, counts))
        remapped = {"uncorrectable_rows": row["remapped_uncorrectable"]}
        if row["remap_failure"]:
            message = (
                f"{where}: row remapping failed (Remapping Failure Occurred: Yes): bad memory "
                f"rows can no longer be replaced. What to do: {_action('replace', pci)}."
            )
            findings.append(Finding("fail", "row-remap-failed", message, gpu, remapped))
        if row["remap_pending"]:
            message = (
                f"{where}: a row remapping is pending ({row['remapped_uncorrectable']} rows "
                "remapped for uncorrectable errors): it takes effect at the next GPU reset. "
                f"What to do: {_action('drain-reset', pci)}."
            )
            findings.append(Finding("warn", "row-remap-pending", message, gpu, remapped))
        retired = (row["retired_single_bit"] or 0) + (row["retired_double_bit"] or 0)
        pages = {
            "single_bit": row["retired_single_bit"],
            "double_bit": row["retired_double_bit"],
            "pending": row["retired_pending"],
        }
        if row["retired_pending"]:
            message = (
                f"{where}: pages wait to be retired (Pending Page Blacklist: Yes; {retired} "
                f"retired so far). What to do: {_action('drain-reset', pci)}."
            )
            findings.append(Finding("warn", "retired-pages", message, gpu, pages))
        elif retired:
            message = (
                f"{where}: {retired} memory page(s) retired for ECC errors "
                f"({row['retired_double_bit'] or 0} double-bit). Watch it: if the count grows, "
                f"{_action('replace', pci)}."
            )
            findings.append(Finding("warn", "retired-pages", message, gpu, pages))
    return findings


def findings_for_nvlink(counters: dict[str, dict[str, dict[str, int]]]) -> list[Finding]:
    """A GPU whose NVLink CRC, replay or recovery counters are not 0 (``nvidia-smi nvlink
    -e``, parse_nvlink_errors)."""
    findings = []
    for gpu, links in sorted(counters.items(), key=_by_index):
        bad = {
            link: {name: count for name, count in names.items() if count}
            for link, names in links.items()
            if any(names.values())
        }
        if not bad:
            continue
        listed = "; ".join(
            f"link {link}: " + ", ".join(f"{name} {count}" for name, count in sorted(names.items()))
            for link, names in sorted(bad.items(), key=_by_index)
        )
        message = (
            f"GPU {gpu}: NVLink error counters are not 0 ({listed}). Note them, clear them "
            "(`nvidia-smi nvlink -re`) and audit again after load: counts that grow again mean "
            f"a failing link. What to do then: {_action('drain-reset', None)}; if they still "
            f"grow, {_action('replace', None)}."
        )
        findings.append(Finding("warn", "nvlink-errors", message, gpu_number(gpu), {"links": bad}))
    return findings


def _reason_samples(samples: list[list[dict]]) -> dict[str, dict[str, list[bool]]]:
    """GPU index -> reason -> its readings (Active or not) over the samples, for the reasons
    of data/gpu_health.toml [clocks]; readings nvidia-smi could not give are left out."""
    reasons = [field for field in data.gpu_health().clocks.query]
    readings: dict[str, dict[str, list[bool]]] = {}
    for sample in samples:
        for position, row in enumerate(sample):
            gpu = row.get("index") or str(position)
            for reason in reasons:
                value = row.get(reason)
                if value is not None:
                    readings.setdefault(gpu, {}).setdefault(reason, []).append(value == "Active")
    return readings


def findings_for_clocks(samples: list[list[dict]], load_kind: str) -> tuple[list[Finding], int]:
    """``clock-throttled`` for a GPU whose clocks the hardware held down (HW slowdown,
    thermal, power brake) in at least [clocks] min_share of the samples taken while the
    audit's load ran; and how many samples were read. Samples read idle are not judged."""
    if load_kind == "none":
        return [], 0
    readings = _reason_samples(samples)
    share = data.gpu_health().clocks.min_share
    findings = []
    for gpu, reasons in sorted(readings.items(), key=_by_index):
        held = {
            reason.rsplit(".", 1)[1]: round(sum(values) / len(values), 2)
            for reason, values in reasons.items()
            if values and sum(values) / len(values) >= share
        }
        if not held:
            continue
        listed = ", ".join(
            f"{name} in {int(part * 100)}% of samples" for name, part in held.items()
        )
        message = (
            f"GPU {gpu}: the hardware held its clocks down under the {load_kind} load ({listed}). "
            "Check its cooling and power (temperatures, fans, power supply and cables); if it "
            f"persists, {_action('drain-reset', None)}; if it still does, "
            f"{_action('replace', None)}."
        )
        findings.append(
            Finding("warn", "clock-throttled", message, gpu_number(gpu), {"share": held})
        )
    return findings, sum(1 for sample in samples if any(_reason_samples([sample]).values()))


def xids_read(xids: list | dict) -> tuple[list[XidEvent], str]:
    """The Xid events of a kernel log read and what the read covered, in words: KernelXids
    gives ``{"events", "read"}``; a record of an earlier release (a list) said nothing of
    what it read, so neither is this said."""
    if isinstance(xids, dict):
        events = xids.get("events")
        read = xids.get("read")
        return (
            events if isinstance(events, list) else [],
            read if isinstance(read, str) and read else "the kernel log (its extent not known)",
        )
    return xids, "the kernel log read (its extent not recorded)"


def findings_for_gpu_health(
    gpus: list[dict],
    xids: list[XidEvent] | dict | None,
    memory: list[dict] | None,
    nvlink: dict | None,
    clock_samples: list[list[dict]],
    load_kind: str,
) -> list[Finding]:
    """Every GPU health finding, and ``gpu-health`` (ok) naming what was read when none of
    them is a problem. None: not read (no finding from it)."""
    findings: list[Finding] = []
    read = []
    if xids is not None:
        events, covered = xids_read(xids)
        findings += findings_for_xids(events, gpus)
        read.append(f"no Xid in {covered}")
    if memory is not None:
        findings += findings_for_memory(memory, gpus)
        unread, said = _ecc_unread(memory, gpus)
        findings += unread
        if said:
            read.append(said)
    if nvlink is not None:
        findings += findings_for_nvlink(nvlink)
        links = sum(len(links) for links in nvlink.values())
        read.append(f"NVLink error counters 0 on {links} link(s)" if links else "no NVLink")
    clock_findings, clock_read = findings_for_clocks(clock_samples, load_kind)
    findings += clock_findings
    if clock_read:
        read.append(f"clocks not held down by the hardware under load ({clock_read} samples)")
    # What could not be read is said as a warning of its own; the ok still says what was.
    if read and all(f.code == "gpu-health-unread" for f in findings):
        message = "GPU health: " + "; ".join(read) + "."
        findings.append(Finding("ok", "gpu-health", message))
    return findings


ECC_FIELDS = (
    "dram_uncorrectable_volatile",
    "sram_uncorrectable_volatile",
    "dram_uncorrectable_aggregate",
    "sram_uncorrectable_aggregate",
)


def _ecc_unread(memory: list[dict], gpus: list[dict]) -> tuple[list[Finding], str | None]:
    """``gpu-health-unread`` for the GPUs whose uncorrectable ECC counters were not read (all
    N/A, as with ECC off, or no ECC section), and the ok's words for what was read."""
    if not memory:
        message = (
            "nvidia-smi -q gave no GPU section: no ECC, row remapping or retired-page "
            "counter was read, so nothing is known of the GPUs' memory errors."
        )
        return [Finding("warn", "gpu-health-unread", message)], None
    indexes = _gpu_indexes(gpus)
    findings = []
    read = 0
    for position, row in enumerate(memory):
        if any(row.get(field) is not None for field in ECC_FIELDS):
            read += 1
            continue
        gpu, where = _where(row, position, indexes)
        message = (
            f"{where}: its uncorrectable ECC counters were not read (none printed, or all "
            "N/A: ECC disabled, or a capture without the ECC section), so its memory errors "
            "are unknown. Read `nvidia-smi -q -d ECC`; ECC on a data-center GPU is enabled "
            "with `nvidia-smi -e 1` and a reset."
        )
        findings.append(Finding("warn", "gpu-health-unread", message, gpu))
    if not read:
        return findings, None
    said = (
        f"no uncorrectable ECC error on the {read} of {len(memory)} GPU(s) whose counters "
        "were read, no pending or failed row remapping or retired page"
    )
    return findings, said


def findings_for_dcgm(diag: dict | None) -> list[Finding]:
    """``dcgm-diag`` from ``dcgmi diag -r <level>`` (checks/facts/gpu_health.DcgmDiag:
    parse_dcgm_diag's tests, or ``present`` false where dcgmi is not on PATH). None: not read
    (no finding)."""
    if diag is None:
        return []
    level = diag.get("level")
    command = f"dcgmi diag -r {level}"
    if not diag.get("present"):
        return [Finding("ok", "dcgm-diag", f"{command} not run: dcgmi is not on PATH (no DCGM).")]
    tests = diag.get("tests") or []
    judged = [test for test in tests if test["result"] != "Skip"]
    if not judged:
        head = "; ".join(diag.get("head") or [])[:300] or "nothing"
        message = (
            f"{command} gave no test result (exit {diag.get('rc')}; it printed: {head}). Is "
            "the nvidia-dcgm service (nv-hostengine) running? `systemctl status nvidia-dcgm`, "
            "then run the command by hand."
        )
        return [Finding("warn", "dcgm-diag", message, evidence={"rc": diag.get("rc")})]
    findings = []
    for test in judged:
        if test["result"] not in ("Fail", "Warn"):
            continue
        bad = sorted(gpu for gpu, result in test["gpus"].items() if result == test["result"])
        where = f" on GPU {', '.join(bad)}" if bad else ""
        detail = " ".join(test["details"])[:300]
        what = (
            f"{_action('drain-reset', None)}, then run `{command}` again; if it fails again, "
            f"{_action('replace', None)}"
            if test["result"] == "Fail"
            else f"read the detail, fix what it names and run `{command}` again"
        )
        message = (
            f'{command}: {test["category"]} test "{test["name"]}" {test["result"]}{where}'
            + (f" ({detail})" if detail else "")
            + f". What to do: {what}."
        )
        gpu = gpu_number(bad[0]) if len(bad) == 1 else None
        level = "fail" if test["result"] == "Fail" else "warn"
        evidence = {"test": test["name"], "result": test["result"], "gpus": test["gpus"]}
        findings.append(Finding(level, "dcgm-diag", message, gpu, evidence))
    rc = diag.get("rc")
    if rc != 0 and not any(f.level == "fail" for f in findings):
        # A run cut off by its timeout (124) or ended by an error printed some rows and not
        # the rest: what it did not reach was never run, so no pass is claimed.
        why = "cut off by the audit's timeout" if rc == 124 else "not a clean end"
        read = sum(1 for test in judged if test["result"] == "Pass")
        message = (
            f"{command} exited {rc} ({why}) after {len(judged)} test result(s), {read} of "
            "them passes: the tests it had not reached were never run. Run it by hand, or "
            "raise [diag] timeout_s (data/dcgm.toml) for this level."
        )
        findings.append(Finding("warn", "dcgm-diag", message, evidence={"rc": rc}))
    if findings:
        return findings
    skipped = len(tests) - len(judged)
    version = (diag.get("metadata") or {}).get("DCGM Version")
    message = (
        f"{command}: exit 0, {len(judged)} test(s) passed"
        + (f", {skipped} skipped" if skipped else "")
        + (f" (DCGM {version})" if version else "")
        + "."
    )
    return [Finding("ok", "dcgm-diag", message, evidence={"passed": len(judged), "rc": rc})]
