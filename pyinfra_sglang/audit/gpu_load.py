"""The shell that runs a GPU load on a host while nvidia-smi samples its GPUs (a host program
the audit runs through checks/gpu_load.py), and the output's reading: pure, so a recorded run
(tests/fixtures/gpu/h200-sampled-load) is judged as the audit judges a live one."""

from __future__ import annotations

import shlex

from pyinfra_sglang import data
from pyinfra_sglang.parsers.nvidia_smi import (
    CLOCK_REASONS_MARK,
    GPU_QUERY_FIELDS,
    parse_gpu_query_under_load,
)

# index, then the clock event reasons judged under load (data/gpu_health.toml [clocks]).
CLOCK_REASON_FIELDS = ",".join(("index", *data.gpu_health().clocks.query))

__all__ = ["parse_gpu_query_under_load", "sampled_load_command"]


def sampled_load_command(load: str, interval_s: float = 0.2, timeout_s: int = 120) -> str:
    """Shell that runs ``load`` (shell, cut at ``timeout_s``) while ``nvidia-smi --query-gpu``
    samples every ``interval_s``; prints ``### load rc=<rc>``, the load's output,
    ``### samples``, then the samples (see parse_gpu_query_under_load)."""
    query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
    # The clock event reasons, apart: a driver without these fields fails only this query.
    reasons = f"nvidia-smi --query-gpu={CLOCK_REASON_FIELDS} --format=csv"
    return (
        "tmp=$(mktemp -d); "
        f'( while [ ! -e "$tmp/done" ]; do {query} 2>/dev/null; '
        f'{reasons} >> "$tmp/reasons" 2>/dev/null; sleep {float(interval_s)}; '
        'done ) > "$tmp/samples" & sampler=$!; '
        f'timeout {int(timeout_s)} sh -c {shlex.quote(load)} > "$tmp/load" 2>&1; rc=$?; '
        'touch "$tmp/done"; wait $sampler; '
        'echo "### load rc=$rc"; cat "$tmp/load"; echo "### samples"; cat "$tmp/samples"; '
        f'echo "{CLOCK_REASONS_MARK}"; cat "$tmp/reasons" 2>/dev/null; '
        'rm -rf "$tmp"'
    )
