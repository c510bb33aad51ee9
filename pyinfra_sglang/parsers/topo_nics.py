"""How each GPU reaches each NIC, from `nvidia-smi topo -m` (NvidiaNicPaths): the GPU rows'
cells under the NIC columns, with the NIC legend's device names ("NIC0: mlx5_0"; an older
nvidia-smi names the columns after the devices themselves). The GPU-to-GPU matrix is
parsers/topo.py's.

    {"0": {"mlx5_0": "PIX", "mlx5_1": "NODE", ...}, "1": {...}}
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"GPU(\d+)")
_DEVICE = re.compile(r"[A-Za-z][\w.-]*\d")  # GPU0, NIC1, mlx5_0; not "CPU", "Affinity"
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")


def parse_nic_paths(output: Iterable[str]) -> dict[str, dict[str, str]]:
    """{GPU index: {NIC device: path}} of the last `topo -m` matrix with NIC columns; {}
    when there is none (no NIC, no nvidia-smi, another command's output)."""
    legend: dict[str, str] = {}
    columns: list[str] = []
    paths: dict[str, dict[str, str]] = {}
    for line in output:
        text = _ANSI.sub("", line)
        named = _LEGEND.match(text)
        if named:
            legend[named[1]] = named[2]
            continue
        tokens = text.split()
        if not tokens:
            continue
        if tokens[0] == "GPU0" and (len(tokens) == 1 or _DEVICE.fullmatch(tokens[1])):
            columns, paths = [], {}
            for token in tokens:
                if not _DEVICE.fullmatch(token):
                    break  # the affinity columns follow the devices
                columns.append(token)
            continue
        gpu = _GPU.fullmatch(tokens[0])
        if gpu and columns:
            paths[gpu[1]] = {
                column: cell
                for column, cell in zip(columns, tokens[1:])
                if not _GPU.fullmatch(column)
            }
    return {
        gpu: {legend.get(nic, nic): cell for nic, cell in nics.items()}
        for gpu, nics in paths.items()
        if nics
    }
