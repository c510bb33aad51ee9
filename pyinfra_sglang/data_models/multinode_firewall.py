"""The model of pyinfra_sglang/data/multinode_firewall.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class MultinodeFirewall(DataModel):
    table: str
    dist_init_port_span: int
    ephemeral_ports: tuple[int, int]
    rules_path: str
    unit_name: str
    unit_path: str
    sysctl_path: str
