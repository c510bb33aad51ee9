"""NVIDIA driver and CUDA names and paths from data/nvidia.toml: which packages a host gets,
which one carries the kernel module, where the toolkit lives. Shared by the roles that install
them and the audit that checks them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pyinfra_sglang import data
from pyinfra_sglang.arch import Arch, ArchError
from pyinfra_sglang.driver.fabric import is_fabric_manager_package


class DriverChoice(Protocol):
    """The inventory's driver values the package names depend on (a HostConfig has them;
    the configuration imports this module, so it is not imported here)."""

    nvidia_driver_branch: int
    nvidia_driver_install: str
    nvidia_kernel_modules: str


@dataclass(frozen=True)
class DriverNames:
    """Those values alone, for a plan made without an inventory (`pyinfra-sglang packages`)."""

    nvidia_driver_branch: int
    nvidia_driver_install: str
    nvidia_kernel_modules: str


# Debian/Ubuntu's convention for "this host needs a reboot" (motd, needrestart, the audit).
REBOOT_REQUIRED = "/run/reboot-required"
REBOOT_REQUIRED_PKGS = "/run/reboot-required.pkgs"


def driver_packages(family: str, config: DriverChoice) -> list[tuple[str, ...]]:
    """The driver packages for the host's family of names, install kind and module flavor:
    each entry the candidate names for one package, in order (one name: no choice)."""
    entries = data.nvidia().driver.packages[family].of(config.nvidia_driver_install)
    return [
        _candidates(entry, config.nvidia_driver_branch)
        for entry in entries.of(config.nvidia_kernel_modules)
    ]


def kernel_module_packages(family: str, config: DriverChoice) -> tuple[str, ...]:
    """Names of the package carrying the kernel module in that family (the first installed
    one is the host's)."""
    names = data.nvidia().driver.kernel_module_packages[family]
    return _candidates(names.of(config.nvidia_kernel_modules), config.nvidia_driver_branch)


def all_kernel_module_packages(config: DriverChoice) -> tuple[str, ...]:
    """The module package names of every family, for readers that do not know the family
    (the audit): a host has at most one of them installed."""
    families = data.nvidia().driver.kernel_module_packages
    return tuple(
        name for family in sorted(families) for name in kernel_module_packages(family, config)
    )


def _candidates(entry: str | tuple[str, ...], branch: int) -> tuple[str, ...]:
    names = [entry] if isinstance(entry, str) else entry
    return tuple(name.format(branch=branch) for name in names)


def driver_branch_of(deb_version: str) -> int | None:
    """590.48.01-1 -> 590; None for a version that is no driver branch's (1.17.8-1)."""
    upstream = upstream_version(deb_version)
    head, _, rest = upstream.partition(".")
    return int(head) if len(head) == 3 and head.isdigit() and rest else None


def newer_on_branch(installed: str | None, candidate: str | None, branch: int) -> bool:
    """Does apt offer a newer release of ``branch`` than the installed one?"""
    from pyinfra_sglang.parsers.system import kernel_sort_key

    if not installed or not candidate or driver_branch_of(candidate) != branch:
        return False
    return kernel_sort_key(upstream_version(candidate)) > kernel_sort_key(
        upstream_version(installed)
    )


def installed_on_branch(
    installed: dict[str, list[str]], name: str, branch: int, version: str | None = None
) -> bool:
    return any(on_driver_track(v, branch, version) for v in installed.get(name, []))


def packages_off_branch(
    installed: dict[str, list[str]], branch: int, version: str | None = None
) -> list[str]:
    """Installed NVIDIA driver packages (data/nvidia.toml branch_move_prefixes) with a
    version on another branch (or, with an exact ``version``, any other release): what a
    move to ``branch`` must take along. Fabric Manager is left to its role, which moves it
    to exactly the driver's release (apt's candidate for it is no release of the branch)."""
    prefixes = data.nvidia().driver.branch_move_prefixes
    return sorted(
        name
        for name, versions in installed.items()
        if name.startswith(prefixes)
        and not name.startswith(pinning_prefix())
        and not is_fabric_manager_package(name)
        and any(
            driver_branch_of(v) is not None and not on_driver_track(v, branch, version)
            for v in versions
        )
    )


@dataclass(frozen=True)
class ArchDriverNeeds:
    """What GPUs of one CUDA architecture need of the driver (data/nvidia.toml
    [[driver.architectures]])."""

    arch: str  # "sm_120"
    name: str  # "Blackwell"
    min_branch: int | None
    max_branch: int | None
    modules: tuple[str, ...]


def arch_driver_needs(arch: Arch | str) -> ArchDriverNeeds | None:
    """The row of data/nvidia.toml that holds for ``arch`` (any spelling: "sm_120", "12.0"):
    the last whose ``from_arch`` is at most its number. None for an architecture below every
    row, or text that is no architecture."""
    try:
        number = Arch.parse(arch).number
    except ArchError:
        return None
    rows = sorted(data.nvidia().driver.architectures, key=lambda r: r.from_arch)
    holding = [row for row in rows if row.from_arch <= number]
    if not holding:
        return None
    row = holding[-1]
    return ArchDriverNeeds(
        arch=Arch(number).sm,
        name=row.name,
        min_branch=row.min_branch,
        max_branch=row.max_branch,
        modules=row.modules,
    )


def needs_open_modules(arch: str) -> bool:
    """sm_120 -> True: Blackwell and later run only on the open kernel modules."""
    needs = arch_driver_needs(arch)
    return needs is not None and needs.modules == ("open",)


@dataclass(frozen=True)
class DriverMismatch:
    """An inventory driver setting that cannot run GPUs of one architecture."""

    field: str  # "nvidia_driver_branch" or "nvidia_kernel_modules"
    arch: str
    message: str
    allowed: str


def driver_mismatches(arch: str, branch: int, modules: str) -> list[DriverMismatch]:
    """What of ``branch`` and ``modules`` cannot run GPUs of ``arch``: each with what is
    allowed instead (branches among those this project installs)."""
    needs = arch_driver_needs(arch)
    if needs is None:
        return []
    gpus = f"{needs.name} GPUs ({needs.arch})"
    mismatches = []
    low, high = needs.min_branch, needs.max_branch
    if (low is not None and branch < low) or (high is not None and branch > high):
        known = data.nvidia().driver_branches
        fits = [b for b in known if (low is None or b >= low) and (high is None or b <= high)]
        span = (
            f"branches {low} to {high}"
            if low is not None and high is not None
            else f"branch {low} or later"
            if low is not None
            else f"branches up to {high}"
        )
        mismatches.append(
            DriverMismatch(
                "nvidia_driver_branch",
                needs.arch,
                f"driver branch {branch} cannot run {gpus}: they run on {span}",
                ", ".join(str(b) for b in fits)
                or f"none of the branches this project installs ({', '.join(map(str, known))})",
            )
        )
    if modules not in needs.modules:
        mismatches.append(
            DriverMismatch(
                "nvidia_kernel_modules",
                needs.arch,
                f"{modules} kernel modules cannot run {gpus}: they run only on NVIDIA's "
                f"{' or '.join(needs.modules)} modules",
                ", ".join(needs.modules),
            )
        )
    return mismatches


def compute_cap_arch(compute_cap: str | None) -> str | None:
    """nvidia-smi's compute_cap "12.0" -> "sm_120"; None for "[N/A]" or nothing. Kept for
    roles/nvidia_driver.py: Arch.parse is the one converter."""
    try:
        # Only nvidia-smi's own spelling: "12" is no compute capability.
        return Arch.parse(compute_cap).sm if compute_cap and "." in compute_cap else None
    except ArchError:
        return None


def pinning_package(branch: int, version: str | None = None) -> str:
    """The pin the driver role installs: the exact-version one when ``version`` is given
    (nvidia_driver_version), the branch's otherwise."""
    driver = data.nvidia().driver
    if version:
        return driver.version_pinning_package.format(version=version)
    return driver.pinning_package.format(branch=branch)


def pinning_prefix() -> str:
    """What every pinning package's name starts with (branch and version pins alike)."""
    return data.nvidia().driver.pinning_package.format(branch="")


def on_driver_track(deb_version: str, branch: int, version: str | None = None) -> bool:
    """Is a package version the one the pin asks for: ``version`` exactly (any Debian
    revision) when given, else any release of ``branch``?"""
    if version:
        return upstream_version(deb_version) == version
    return driver_branch_of(deb_version) == branch


@dataclass(frozen=True)
class BranchSupport:
    """NVIDIA's support of one driver branch (data/nvidia.toml [[branch_support]])."""

    branch: int
    support: str  # "long-term", "production" or "feature"
    end_of_support: str | None  # "YYYY-MM", the last month supported
    on_matrix: bool

    def text(self) -> str:
        until = f" to {self.end_of_support}" if self.end_of_support else ""
        return f"R{self.branch} ({self.support}{until})"


def branch_support(branch: int) -> BranchSupport | None:
    for row in data.nvidia().branch_support:
        if row.branch == branch:
            return BranchSupport(row.branch, row.support, row.end_of_support, row.on_matrix)
    return None


def supported_branches(today: str) -> list[BranchSupport]:
    """Branches on NVIDIA's matrix and not past their end on ``today`` ("YYYY-MM-DD"): what
    the audit names when a host's branch is not one of them."""
    rows = [branch_support(row.branch) for row in data.nvidia().branch_support]
    return [
        row for row in rows if row is not None and row.on_matrix and not support_ended(row, today)
    ]


def support_ended(row: BranchSupport, today: str) -> bool:
    """Past the last month of support on ``today`` ("YYYY-MM-DD"; "YYYY-MM" compares as is)."""
    return row.end_of_support is not None and today[:7] > row.end_of_support


def version_key(version: str) -> tuple[int, ...]:
    """590.48.01 -> (590, 48, 1): driver versions compare by their numbers."""
    return tuple(int(part) for part in version.split(".") if part.isdigit())


@dataclass(frozen=True)
class ToolkitDriverMinimum:
    """The lowest driver one update of a CUDA release needs (data/nvidia.toml
    [[cuda_driver_minimum]]: CUDA release notes, Table 3)."""

    release: str  # "13.1"
    update: str  # "GA", "Update 1"
    driver: str  # "590.48.01"

    def text(self) -> str:
        return f"CUDA {self.release} {self.update} needs driver >= {self.driver}"


def toolkit_driver_minimums(release: str) -> list[ToolkitDriverMinimum]:
    """Every update of ``release``, GA first; empty for a release without rows."""
    rows = [
        ToolkitDriverMinimum(row.release, row.update, row.driver)
        for row in data.nvidia().cuda_driver_minimum
        if row.release == release
    ]
    return sorted(rows, key=lambda row: version_key(row.driver))


def minor_version_compat_floor(release: str) -> int | None:
    """The lowest branch programs of ``release``'s major start on at all (minor-version
    compatibility, with a limited feature set)."""
    return data.nvidia().cuda_minor_version_compat.get(release.split(".")[0])


TOOLKIT_SOURCE = (
    "NVIDIA CUDA Toolkit release notes, Table 3 'CUDA Toolkit and Corresponding Driver "
    "Versions' (data/nvidia.toml [[cuda_driver_minimum]])"
)


def driver_below_toolkit(release: str, branch: int, version: str | None) -> str | None:
    """Why ``branch`` (or the exact ``version``) cannot serve CUDA ``release`` as installed
    (its newest update, what NVIDIA's repository installs), or None when it can."""
    rows = toolkit_driver_minimums(release)
    if not rows:
        return None
    needed = rows[-1]
    needed_branch = version_key(needed.driver)[0]
    if branch < needed_branch:
        return f"branch {branch} is older than {needed.driver}: {needed.text()}"
    if version and branch == needed_branch and version_key(version) < version_key(needed.driver):
        return f"{version} is older than {needed.driver}: {needed.text()}"
    return None


def upstream_version(deb_version: str) -> str:
    """590.48.01-1 -> 590.48.01 (an epoch, if any, and the Debian revision dropped)."""
    return deb_version.split(":", 1)[-1].rsplit("-", 1)[0]


def cuda_paths(version: str) -> dict[str, str]:
    """The toolkit's package, home, nvcc, and the profile and linker files that expose it."""
    cuda = data.nvidia().cuda
    home = cuda.home.format(version=version)
    return {
        "package": cuda.toolkit_package.format(dashed=version.replace(".", "-")),
        "home": home,
        "nvcc": f"{home}/bin/nvcc",
        "profile_script": cuda.profile_script,
        "ld_conf": cuda.ld_conf,
    }


def installed_module_versions(
    installed: dict[str, list[str]], module_packages: tuple[str, ...]
) -> tuple[str | None, list[str]]:
    """The first installed of the module package names, and its versions."""
    for name in module_packages:
        if installed.get(name):
            return name, installed[name]
    return None, []
