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


def findings_for_links(idle: list[dict], samples: list[list[dict]], load: str) -> list[Finding]:
    """``idle``: one ``--query-gpu`` sample; ``samples``: those taken while ``load`` ran
    (``decode``, ``copy``, ``probe``, or ``none`` when nothing could load the GPUs)."""
    loaded = links_under_load(samples) if load in MEASURED_LOADS and samples else {}
    when = f"under {MEASURED_LOADS[load]}" if loaded else "while the GPUs may be idle"
    findings: list[Finding] = []
    for row, gpu in zip(idle, pcie_links(idle)):
        index = gpu["index"]
        link = loaded.get(index, gpu["pcie"])
        evidence = {**link, "read": "under load" if loaded else "idle", "load": load}
        # A reading no sample gave is unknown, never "at its maximum".
        unread = unread_fields(row, [LINK_FIELDS[k] for k, v in link.items() if v is None])
        if unread:
            findings.append(
                Finding(
                    "warn",
                    "pcie-link-unknown",
                    f"GPU {index} ({gpu['name']}): PCIe link not judged, {unread_text(unread)}. "
                    "Read it with `nvidia-smi --query-gpu=index,pcie.link.gen.current,"
                    "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv` "
                    "or `nvidia-smi -q`.",
                    gpu=index,
                    evidence={**evidence, "unread": unread},
                )
            )
        if (
            link["width_current"]
            and link["width_max"]
            and link["width_current"] < link["width_max"]
        ):
            findings.append(
                Finding(
                    "fail",
                    "pcie-width-degraded",
                    f"GPU {index} ({gpu['name']}): PCIe link is x{link['width_current']} of "
                    f"x{link['width_max']} ({when}); host<->GPU bandwidth is cut in proportion. "
                    "Check the slot's wiring and bifurcation setting, risers and seating.",
                    gpu=index,
                    evidence=evidence,
                )
            )
        if link["gen_current"] and link["gen_max"] and link["gen_current"] < link["gen_max"]:
            if loaded:
                level, advice = (
                    "fail",
                    (
                        "The link trained down: check the BIOS PCIe speed setting, risers and "
                        "retimers, and `dmesg` for PCIe AER errors."
                    ),
                )
            else:
                level, advice = (
                    "warn",
                    (
                        "Idle links drop their speed, so this may be normal: start the SGLang "
                        "service (or install torch in the venv) and audit again to read it "
                        "under load."
                    ),
                )
            findings.append(
                Finding(
                    level,
                    "pcie-gen-below-max",
                    f"GPU {index} ({gpu['name']}): PCIe link runs Gen{link['gen_current']} of "
                    f"Gen{link['gen_max']} ({when}). {advice}",
                    gpu=index,
                    evidence=evidence,
                )
            )
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
