"""The model of pyinfra_sglang/data/model.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number


class DiskMargin(DataModel):
    fraction: Number
    min_gb: Number


class ModelDownload(DataModel):
    unit: str
    program_dir: str
    env_file: str
    log: str
    sandbox: tuple[str, ...]
    seed_unit: str
    seed_env_file: str
    seed_table: str
    manifest: str
    log_every_s: Number
    print_every_s: Number
    environment: dict[str, str]


class CacheDirRules(DataModel):
    system_trees: tuple[str, ...]
    dedicated_roots: tuple[str, ...]
    shared_parents: tuple[str, ...]


class Model(DataModel):
    api_timeout_s: Number
    audit_api_timeout_s: Number
    cache_dir: CacheDirRules
    disk_margin: DiskMargin
    download: ModelDownload
