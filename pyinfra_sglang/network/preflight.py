"""The all-reduce preflight's verdict on one member (host_programs/allreduce_preflight.py's
output): a fail says what did not happen, with its numbers; ok only about what was measured."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra_sglang import data

# timeout(1)'s exit for a program it stopped, and a shell's for one it KILLed.
TIMED_OUT = (124, 137)


@dataclass(frozen=True)
class PreflightVerdict:
    level: str  # "ok", "warn" or "fail"
    text: str


def _result(output: str) -> dict | None:
    for line in reversed(output.strip().splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


def preflight_verdict(output: str, exit_code: int, timeout_s: float) -> PreflightVerdict:
    """``output``/``exit_code``: the program's, run under timeout(1) with ``timeout_s`` as
    its process group timeout."""
    settings = data.multinode_preflight()
    if exit_code in TIMED_OUT:
        limit = timeout_s + settings.kill_after_s
        return PreflightVerdict(
            "fail", f"the all-reduce preflight did not finish within {limit:.0f} s: stopped"
        )
    result = _result(output)
    if result is None:
        tail = output.strip().splitlines()[-1:] or ["(nothing)"]
        return PreflightVerdict(
            "fail", f"the all-reduce preflight printed no result (exit {exit_code}): {tail[0]}"
        )
    where = f"rank {result['rank']} of {result['world']}" if "rank" in result else "this member"
    interface = result.get("interface") or "the interface Gloo picked"
    if result.get("error"):
        stage = result.get("stage", "start")
        after = f" after {result['elapsed_s']} s" if "elapsed_s" in result else ""
        return PreflightVerdict(
            "fail",
            f"{where}: the {stage} at {result.get('rendezvous', '?')} over {interface} "
            f"failed{after}: {result['error']}",
        )
    if result.get("correct") is not True:
        return PreflightVerdict(
            "fail", f"{where}: the all-reduce over {interface} gave a wrong sum"
        )
    busbw = float(result["busbw_gbs"])
    measured = (
        f"all-reduce of {result['bytes'] // (1 << 20)} MiB: bus bandwidth {busbw:.2f} GB/s "
        f"over {interface}, rendezvous in {result['rendezvous_s']:.1f} s, sum right"
    )
    rate = result.get("line_rate_mbps")
    if not rate:
        return PreflightVerdict(
            "warn", f"{where}: {measured}; {interface}'s line rate was not readable: not judged"
        )
    floor = settings.min_line_rate_fraction * rate / 8 / 1000  # Mb/s -> GB/s
    if busbw < floor:
        return PreflightVerdict(
            "fail",
            f"{where}: {measured}: below {floor:.2f} GB/s "
            f"({settings.min_line_rate_fraction:.0%} of its {rate / 1000:g} Gb/s line rate)",
        )
    return PreflightVerdict("ok", f"{where}: {measured} (line rate {rate / 1000:g} Gb/s)")
