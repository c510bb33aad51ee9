"""The audit's GPU load runs turned into its GpuLoadReading: pure, so recorded runs
(tests/fixtures/gpu/h200-sampled-load) are judged as live ones are. A run is what
parse_gpu_query_under_load reads: ``{"load_rc", "load_output", "samples"}``.

The audit loads the GPUs with the decode prompt when the service serves, then (with torch in
the venv) with the link probe when asked for, else with a copy load when nothing loaded them
yet; checks/audit.py runs the loads, these functions decide what each run means.
"""

from __future__ import annotations

import dataclasses
import json

from pyinfra_sglang.audit.record import GpuLoadReading


def json_output(lines: list[str]) -> dict | None:
    """The last JSON object a probe printed (it may span several lines; warnings may come
    before or after it)."""
    decoder = json.JSONDecoder()
    text = "\n".join(lines)
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("{")]
    for index in reversed(starts):
        offset = len("\n".join(lines[:index])) + (1 if index else 0)
        indent = len(lines[index]) - len(lines[index].lstrip())
        try:
            value, _ = decoder.raw_decode(text, offset + indent)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def output_tail(run: dict) -> str:
    """The run's exit status and last three lines, for a message."""
    return f"exit {run['load_rc']}: " + " ".join(run["load_output"][-3:])


def after_decode(run: dict) -> GpuLoadReading:
    """The reading after the decode prompt ran: its samples count only when it answered (a
    failed prompt loaded nothing); its result is kept either way."""
    decode = json_output(run["load_output"]) or {
        "ok": False,
        "reason": "protocol-error",
        "message": f"the decode check printed no result ({output_tail(run)})",
    }
    if decode.get("ok"):
        return GpuLoadReading(
            kind="decode",
            samples=run["samples"],
            decode=decode,
            clock_reasons=run.get("clock_reasons", []),
        )
    return GpuLoadReading(decode=decode)


def needs_load(before: GpuLoadReading, link_probe: bool, torch: bool) -> str | None:
    """The load to run next ("probe" or "copy"), None when none: without torch there is
    none; the probe when asked for, else the copy load only when nothing loaded the GPUs."""
    if not torch or not (link_probe or before.kind == "none"):
        return None
    return "probe" if link_probe else "copy"


def after_load(before: GpuLoadReading, load_kind: str, run: dict) -> GpuLoadReading:
    """The reading after the probe or copy load ran: its samples added and its JSON kept when
    it exited 0; else the reading before, with why the probe failed (a copy load that could
    not run says nothing worth a finding)."""
    if run["load_rc"] == 0:
        return dataclasses.replace(
            before,
            kind=load_kind,
            samples=before.samples + run["samples"],
            clock_reasons=before.clock_reasons + run.get("clock_reasons", []),
            probe=json_output(run["load_output"]),
        )
    failure = output_tail(run) if load_kind == "probe" else None
    return dataclasses.replace(before, probe_failure=failure)
