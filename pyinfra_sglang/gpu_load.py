"""The shell that runs a GPU load on a host while nvidia-smi samples its GPUs (a host program
the audit runs through checks/gpu_load.py), and the output's reading: pure, so a recorded run
(tests/fixtures/gpu/h200-sampled-load) is judged as the audit judges a live one."""

from __future__ import annotations

import shlex

from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS, parse_gpu_query_under_load

__all__ = ["parse_gpu_query_under_load", "sampled_load_command"]


def sampled_load_command(load: str, interval_s: float = 0.2, timeout_s: int = 120) -> str:
    """Shell that runs ``load`` (shell, cut at ``timeout_s``) while ``nvidia-smi --query-gpu``
    samples every ``interval_s``; prints ``### load rc=<rc>``, the load's output,
    ``### samples``, then the samples (see parse_gpu_query_under_load)."""
    query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
    return (
        "tmp=$(mktemp -d); "
        f'( while [ ! -e "$tmp/done" ]; do {query} 2>/dev/null; sleep {float(interval_s)}; '
        'done ) > "$tmp/samples" & sampler=$!; '
        f'timeout {int(timeout_s)} sh -c {shlex.quote(load)} > "$tmp/load" 2>&1; rc=$?; '
        'touch "$tmp/done"; wait $sampler; '
        'echo "### load rc=$rc"; cat "$tmp/load"; echo "### samples"; cat "$tmp/samples"; '
        'rm -rf "$tmp"'
    )
