"""PCIe links: what each GPU's link runs at against what it could run at.

A link's current generation drops when its GPU idles (power saving), so generation is judged
on readings taken under load; width does not drop with load and a narrower link than the slot
offers is a fault (a card in an x8 slot, a bad riser, bifurcation).
"""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.unread import unread_fields, unread_text

# Loads the audit knows how to put on the GPUs while it samples the links.
MEASURED_LOADS = {
    "decode": "the decode sanity prompt",
    "copy": "a host-to-GPU copy load",
    "probe": "the link bandwidth probe",
}


# The --query-gpu field behind each link reading.
LINK_FIELDS = {
    "gen_current": "pcie.link.gen.current",
    "gen_max": "pcie.link.gen.max",
    "width_current": "pcie.link.width.current",
    "width_max": "pcie.link.width.max",
}


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def pcie_links(rows: list[dict]) -> list[dict]:
    """One ``{"index", "name", "pcie": {gen_current, gen_max, width_current, width_max}}``
    per GPU of a ``--query-gpu`` sample (None where the driver reports N/A)."""
    return [
        {
            "index": int(row["index"]),
            "name": row.get("name"),
            "pcie": {key: _int(row.get(field)) for key, field in LINK_FIELDS.items()},
        }
        for row in rows
    ]


def links_under_load(samples: list[list[dict]]) -> dict[int, dict]:
    """The best generation and width each GPU reached across samples: a link that trained
    to its maximum at any point while loaded can run at it."""
    best: dict[int, dict] = {}
    for sample in samples:
        for gpu in pcie_links(sample):
            link = best.setdefault(gpu["index"], dict(gpu["pcie"]))
            for key in ("gen_current", "width_current"):
                value = gpu["pcie"][key]
                if value is not None and (link[key] is None or value > link[key]):
                    link[key] = value
    return best


def _gpu_label(gpu: dict) -> str:
    """ "GPU 0 (NVIDIA H200)"; "GPU 0" when the input named no GPU (a query without name)."""
    return f"GPU {gpu['index']} ({gpu['name']})" if gpu.get("name") else f"GPU {gpu['index']}"


# A link reading and the maximum it cannot exceed: a current one above it is no reading of a
# working link (an edited copy, a driver misreporting) and is judged neither way.
BOUNDED = {"gen_current": ("gen_max", "Gen{}"), "width_current": ("width_max", "x{}")}


def _inconsistent(link: dict) -> dict[str, str]:
    """``{current field: "Gen6 above its maximum Gen5"}`` for link readings above their max."""
    found = {}
    for key, (top, shown) in BOUNDED.items():
        if link[key] is not None and link[top] is not None and link[key] > link[top]:
            found[LINK_FIELDS[key]] = (
                f"{shown.format(link[key])} above its maximum {shown.format(link[top])}"
            )
    return found


# What to do about a link below its generation read while the GPUs may be idle, by where the
# reading came from: a live host is audited again under load, a pasted capture (`analyze`) is
# taken again while the GPUs work.
IDLE_ADVICE = {
    "none": (
        "Idle links drop their speed, so this may be normal: start the SGLang service (or "
        "install torch in the venv) and audit again to read it under load."
    ),
    "capture": (
        "Idle links drop their speed, so this may be normal: capture the query again while "
        "the GPUs work (`nvidia-smi --query-gpu=index,pcie.link.gen.current,"
        "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv -l 1` "
        "while the benchmark runs) and analyze that."
    ),
}


def findings_for_links(idle: list[dict], samples: list[list[dict]], load: str) -> list[Finding]:
    """``idle``: one ``--query-gpu`` sample; ``samples``: those taken while ``load`` ran
    (``decode``, ``copy``, ``probe``; ``none`` when nothing could load the GPUs of a live
    host, ``capture`` for a pasted file, whose load is not known). One function a finding
    code, per GPU: pcie-link-unknown, pcie-width-degraded, pcie-gen-below-max; pcie-links
    when none of them."""
    loaded = links_under_load(samples) if load in MEASURED_LOADS and samples else {}
    when = f"under {MEASURED_LOADS[load]}" if loaded else "while the GPUs may be idle"
    findings: list[Finding] = []
    for row, gpu in zip(idle, pcie_links(idle)):
        index, label = gpu["index"], _gpu_label(gpu)
        link = loaded.get(index, gpu["pcie"])
        evidence = {**link, "read": "under load" if loaded else "idle", "load": load}
        findings += _link_unknown(row, link, label, index, evidence)
        findings += _width_degraded(link, label, index, when, evidence)
        findings += _gen_below_max(link, label, index, when, evidence, bool(loaded), load)
    if idle and not findings:
        first = loaded.get(0) or pcie_links(idle)[0]["pcie"]
        findings.append(
            Finding(
                "ok",
                "pcie-links",
                f"{len(idle)} GPU links at their maximum (e.g. Gen{first['gen_current']} "
                f"x{first['width_current']}), read {when}.",
                evidence={"read": "under load" if loaded else "idle", "load": load},
            )
        )
    return findings


def _link_unknown(row: dict, link: dict, label: str, index, evidence: dict) -> list[Finding]:
    """pcie-link-unknown: a reading no sample gave (unknown, never "at its maximum"), or one
    above its maximum."""
    found = []
    unread = unread_fields(row, [LINK_FIELDS[k] for k, v in link.items() if v is None])
    if unread:
        found.append(
            Finding(
                "warn",
                "pcie-link-unknown",
                f"{label}: PCIe link not judged, {unread_text(unread)}. "
                "Read it with `nvidia-smi --query-gpu=index,pcie.link.gen.current,"
                "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv` "
                "or `nvidia-smi -q`.",
                gpu=index,
                evidence={**evidence, "unread": unread},
            )
        )
    inconsistent = _inconsistent(link)
    if inconsistent:
        found.append(
            Finding(
                "warn",
                "pcie-link-unknown",
                f"{label}: PCIe link not judged, an inconsistent reading: "
                f"{'; '.join(inconsistent.values())} (read {evidence['read']}). No link "
                "runs above its maximum: read it again with `nvidia-smi -q` (an edited "
                "copy, or the driver misreporting).",
                gpu=index,
                evidence={**evidence, "inconsistent": list(inconsistent)},
            )
        )
    return found


def _width_degraded(link: dict, label: str, index, when: str, evidence: dict) -> list[Finding]:
    """pcie-width-degraded: fewer lanes than the link's maximum, idle or not."""
    if not (link["width_current"] and link["width_max"]):
        return []
    if link["width_current"] >= link["width_max"]:
        return []
    return [
        Finding(
            "fail",
            "pcie-width-degraded",
            f"{label}: PCIe link is x{link['width_current']} of "
            f"x{link['width_max']} ({when}); host<->GPU bandwidth is cut in proportion. "
            "Check the slot's wiring and bifurcation setting, risers and seating.",
            gpu=index,
            evidence=evidence,
        )
    ]


def _gen_below_max(
    link: dict, label: str, index, when: str, evidence: dict, loaded: bool, load: str
) -> list[Finding]:
    """pcie-gen-below-max: a failure under load (the link trained down), a warning while the
    GPUs may be idle (idle links drop their speed), with the advice for where it was read."""
    if not (link["gen_current"] and link["gen_max"] and link["gen_current"] < link["gen_max"]):
        return []
    if loaded:
        level, advice = (
            "fail",
            "The link trained down: check the BIOS PCIe speed setting, risers and retimers, "
            "and `dmesg` for PCIe AER errors.",
        )
    else:
        level, advice = "warn", IDLE_ADVICE.get(load, IDLE_ADVICE["none"])
    return [
        Finding(
            level,
            "pcie-gen-below-max",
            f"{label}: PCIe link runs Gen{link['gen_current']} of "
            f"Gen{link['gen_max']} ({when}). {advice}",
            gpu=index,
            evidence=evidence,
        )
    ]
