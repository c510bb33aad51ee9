"""The model of pyinfra_sglang/data/host_driver.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class DriverOrigin(DataModel):
    archive_prefixes: tuple[str, ...]
    archive_name_patterns: tuple[str, ...]
    archive_revision_patterns: tuple[str, ...]
    runfile_markers: tuple[str, ...]


class HostToolkits(DataModel):
    nvcc_glob: str


class HostDriver(DataModel):
    origin: DriverOrigin
    toolkits: HostToolkits
