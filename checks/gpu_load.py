"""A GPU load run on the host with its links sampled meanwhile: a host program, not a fact.

PCIe link generation drops when a GPU idles, so the audit judges links while something uses
them. The load runs for up to minutes, so it is no fact (pyinfra reads facts to plan, may read
them again and caches them): the audit runs it once while it executes, through the operation's
connector arguments, and hands the output to the pure parse_gpu_query_under_load.
"""

from __future__ import annotations

import shlex

from checks.host_context import connector_arguments
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS, parse_gpu_query_under_load


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


def run_under_load(host, load: str, timeout_s: int) -> dict:
    """Run ``load`` on ``host`` (from inside an executing operation) with its GPUs sampled:
    ``{"load_rc", "load_output", "samples"}``. A wrapper that could not start (no temporary
    folder) gives ``load_rc`` None, as the parser reads it. The load's own ``timeout`` cuts
    it; the connector waits as for any of the operation's commands."""
    command = sampled_load_command(load, timeout_s=timeout_s)
    _, output = host.run_shell_command(command, **connector_arguments(host))
    return parse_gpu_query_under_load(output.stdout_lines)
