"""A GPU load run on the host with its links sampled meanwhile: a host program, not a fact.

PCIe link generation drops when a GPU idles, so the audit judges links while something uses
them. The load runs for up to minutes, so it is no fact (pyinfra reads facts to plan, may read
them again and caches them): the audit runs it once while it executes, through the operation's
connector arguments, and hands the output to the pure parse_gpu_query_under_load
(pyinfra_sglang/audit/gpu_load.py builds the shell).
"""

from __future__ import annotations

from checks.host_context import connector_arguments
from pyinfra_sglang.audit.gpu_load import parse_gpu_query_under_load, sampled_load_command


def run_under_load(host, load: str, timeout_s: int) -> dict:
    """Run ``load`` on ``host`` (from inside an executing operation) with its GPUs sampled:
    ``{"load_rc", "load_output", "samples"}``. A wrapper that could not start (no temporary
    folder) gives ``load_rc`` None, as the parser reads it. The load's own ``timeout`` cuts
    it; the connector waits as for any of the operation's commands."""
    command = sampled_load_command(load, timeout_s=timeout_s)
    _, output = host.run_shell_command(command, **connector_arguments(host))
    return parse_gpu_query_under_load(output.stdout_lines)
