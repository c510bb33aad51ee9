"""The model of pyinfra_sglang/data/nvidia_smi.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class QueryCsv(DataModel):
    identity: tuple[str, ...]
    max_gpus_without_identity: int


class SmiQ(DataModel):
    fields: dict[str, tuple[str, ...]]


class Topo(DataModel):
    topology_cells: tuple[str, ...]
    p2p_cells: tuple[str, ...]
    nic_paths: tuple[str, ...]
    gpudirect_paths: tuple[str, ...]


class NvidiaSmi(DataModel):
    unreadable: tuple[str, ...]
    query_csv: QueryCsv
    smi_q: SmiQ
    topo: Topo
