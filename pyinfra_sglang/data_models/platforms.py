"""The model of pyinfra_sglang/data/platforms.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel


class Platform(DataModel):
    id: str
    version: str
    nvidia_repo: str
    components: tuple[str, ...]
    # The key of nvidia.toml's driver.packages, kernel_module_packages and secure_boot.mok.
    driver_family: str


class BasePackages(DataModel):
    packages: tuple[str, ...]
    kernel_headers_package: str
    kernel_headers_metapackage: str
    unattended_upgrades_blacklist: tuple[str, ...]


class Platforms(DataModel):
    platform: tuple[Platform, ...]
    arch: dict[str, str]
    base: BasePackages
