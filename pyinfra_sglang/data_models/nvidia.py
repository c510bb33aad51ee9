"""The model of pyinfra_sglang/data/nvidia.toml."""

from __future__ import annotations

from typing import Literal

from pyinfra_sglang.data_models.base import DataModel

Flavor = Literal["open", "proprietary"]
# A driver package: one name, or [name from R590, name for R580 and before].
DriverPackage = str | tuple[str, str]


class BranchSupport(DataModel):
    branch: int
    support: Literal["long-term", "production", "feature"]
    on_matrix: bool
    end_of_support: str | None = None


class CudaDriverMinimum(DataModel):
    release: str
    update: str
    driver: str


class NvidiaRepo(DataModel):
    base_url: str
    keyring_package: str
    keyring_deb: str
    keyring_path: str
    list_path: str
    download_dir: str
    signing_key_fingerprint: str
    keyring_deb_files: tuple[str, ...]
    auth_path: str
    mirror_extra_packages: tuple[str, ...]
    keyring_sha256: dict[str, str] = {}


class DriverArchitecture(DataModel):
    from_arch: int
    name: str
    modules: tuple[Flavor, ...]
    min_branch: int | None = None
    max_branch: int | None = None
    sources: dict[str, str]


class FlavorPackages(DataModel):
    open: tuple[DriverPackage, ...]
    proprietary: tuple[DriverPackage, ...]

    def of(self, flavor: str) -> tuple[DriverPackage, ...]:
        """The packages of ``flavor`` (nvidia_kernel_modules: "open" or "proprietary")."""
        return {"open": self.open, "proprietary": self.proprietary}[flavor]


class DriverInstallPackages(DataModel):
    compute: FlavorPackages
    full: FlavorPackages

    def of(self, install: str) -> FlavorPackages:
        """The packages of ``install`` (nvidia_driver_install: "compute" or "full")."""
        return {"compute": self.compute, "full": self.full}[install]


class NvidiaDriver(DataModel):
    pinning_package: str
    version_pinning_package: str
    branch_move_prefixes: tuple[str, ...]
    architectures: tuple[DriverArchitecture, ...]
    # Platform family (platforms.toml driver_family) -> install mode -> flavor -> packages.
    packages: dict[str, DriverInstallPackages]
    kernel_module_packages: dict[str, FlavorPackages]
    sources: dict[str, str]


class MokPaths(DataModel):
    key: str
    cert: str


class SecureBoot(DataModel):
    efi_variable: str
    mok: dict[str, MokPaths]


class Nouveau(DataModel):
    blacklist_path: str


class CudaToolkit(DataModel):
    toolkit_package: str
    home: str
    profile_script: str
    ld_conf: str


class SubnetManager(DataModel):
    from_arch: int
    packages: tuple[str, ...]
    kernel_modules: tuple[str, ...]
    modules_load_path: str


class FabricManager(DataModel):
    service: str
    nvswitch_pci_class: str
    attached_states: tuple[str, ...]
    unattached_states: tuple[str, ...]
    ready_state: str
    ready_status: str
    # Platform family (platforms.toml driver_family) -> candidate names, {branch} filled in.
    packages: dict[str, tuple[str, ...]]
    subnet_manager: tuple[SubnetManager, ...]


class Nvidia(DataModel):
    default_driver_branch: int
    cuda_versions: tuple[str, ...]
    default_cuda_version: str
    branch_support: tuple[BranchSupport, ...]
    cuda_driver_minimum: tuple[CudaDriverMinimum, ...]
    cuda_minor_version_compat: dict[str, int]
    repo: NvidiaRepo
    driver: NvidiaDriver
    secure_boot: SecureBoot
    nouveau: Nouveau
    cuda: CudaToolkit
    fabric_manager: FabricManager

    @property
    def driver_branches(self) -> tuple[int, ...]:
        """The branches this project installs: those [[branch_support]] describes, in
        order (one list, so a branch cannot be installable without its support row)."""
        return tuple(sorted({row.branch for row in self.branch_support}))
