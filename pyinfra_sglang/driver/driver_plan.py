"""The apt plan of the NVIDIA driver for a platform, install kind, module flavor and branch,
from data alone: what roles/nvidia_driver.py installs there, and what a mirror must carry.
`pyinfra-sglang packages` prints it without a host."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra_sglang import data
from pyinfra_sglang.data_models import DriverInstallPackages, FlavorPackages
from pyinfra_sglang.driver.nvidia import (
    DriverNames,
    driver_packages,
    kernel_module_packages,
    pinning_package,
)

HEADER_EXAMPLES = {
    "debian": "6.1.0-28-amd64 -> amd64, 6.1.0-28-cloud-amd64 -> cloud-amd64",
    "ubuntu": "6.8.0-45-generic -> generic, 6.8.0-1015-aws -> aws",
}


@dataclass(frozen=True)
class DriverAptPlan:
    platform: str  # NVIDIA's repository folder, e.g. "debian12"
    family: str  # the family of package names there
    branch: int
    pin: str
    packages: tuple[tuple[str, ...], ...]  # each: candidates, the first on the branch wins
    module_packages: tuple[str, ...]
    headers: str  # the headers metapackage, by the running kernel's flavor
    mirror_extra: tuple[str, ...]  # what else an air-gapped mirror of NVIDIA's repo needs


def platform_names() -> list[str]:
    return [p.nvidia_repo for p in data.platforms().platform]


def driver_apt_plan(platform: str, install: str, modules: str, branch: int) -> DriverAptPlan:
    """The plan; ``platform`` is one of platform_names() (a KeyError otherwise)."""
    match = {p.nvidia_repo: p for p in data.platforms().platform}[platform]
    family = match.driver_family
    # The names alone: no toolkit to check the branch against (validation does, per host).
    config = DriverNames(
        nvidia_driver_branch=branch, nvidia_driver_install=install, nvidia_kernel_modules=modules
    )
    headers = data.platforms().base.kernel_headers_metapackage
    return DriverAptPlan(
        platform=platform,
        family=family,
        branch=branch,
        pin=pinning_package(branch),
        packages=tuple(driver_packages(family, config)),
        module_packages=kernel_module_packages(family, config),
        headers=headers,
        mirror_extra=data.nvidia().repo.mirror_extra_packages,
    )


def format_plan(plan: DriverAptPlan) -> str:
    sources = data.nvidia().driver.sources
    lines = [
        f"# NVIDIA driver on {plan.platform} ({plan.family} names), branch {plan.branch}",
        f"1. pin:       {plan.pin}  (apt-get install; swaps out any other branch's pin)",
        "2. packages:  one apt-get install --no-install-recommends --allow-downgrades, with "
        "every installed driver package of another branch moved along:",
    ]
    for entry in plan.packages:
        if len(entry) == 1:
            lines.append(f"     {entry[0]}")
        else:
            lines.append(
                f"     the first of {', '.join(entry)} with a version on branch {plan.branch} "
                "(resolved on the host)"
            )
    lines += [
        f"3. module:    the installed version of {' or '.join(plan.module_packages)} is the "
        "driver the kernel must load (else reboot)",
        f"4. headers:   linux-headers-$(uname -r) and "
        f"{plan.headers.format(flavor='<flavor>')} (<flavor> from uname -r: "
        f"{HEADER_EXAMPLES[plan.family]}), so DKMS builds the module for every kernel "
        "installed later",
        f"mirror: besides the above, an air-gapped mirror carries {', '.join(plan.mirror_extra)}",
        "",
        "# where the names come from",
    ]
    names = sorted(
        {name for entry in plan.packages for name in entry} | set(plan.module_packages) | {plan.pin}
    )
    templated = {
        key.format(branch=plan.branch, version="<version>"): value for key, value in sources.items()
    }
    lines += [f"{name}: {templated[name]}" for name in names]
    return "\n".join(lines) + "\n"


def packages_markdown() -> str:
    """docs/packages.md's table: every driver package name the roles may install, per family,
    with its source (data/nvidia.toml)."""
    driver = data.nvidia().driver
    used: dict[str, set[str]] = {}
    for family, installs in driver.packages.items():
        for install in DriverInstallPackages.model_fields:
            for flavor in FlavorPackages.model_fields:
                for entry in installs.of(install).of(flavor):
                    for name in [entry] if isinstance(entry, str) else entry:
                        used.setdefault(name, set()).add(f"{family} {install} {flavor}")
    used.setdefault(driver.pinning_package, set()).add("every platform, first")
    used.setdefault(driver.version_pinning_package, set()).add(
        "every platform, first, instead of the branch's with nvidia_driver_version"
    )
    rows = ["| name | installed for | source |", "| --- | --- | --- |"]
    for name in sorted(used):
        where = ", ".join(sorted(used[name]))
        source = " ".join(driver.sources[name].split()).replace("|", "\\|")
        rows.append(f"| `{name}` | {where} | {source} |")
    return "\n".join(rows) + "\n"
