"""NVIDIA driver and CUDA names and paths from data/nvidia.toml: which packages a host gets,
which one carries the kernel module, where the toolkit lives. Shared by the roles that install
them and the audit that checks them."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig

# Debian/Ubuntu's convention for "this host needs a reboot" (motd, needrestart, the audit).
REBOOT_REQUIRED = "/run/reboot-required"
REBOOT_REQUIRED_PKGS = "/run/reboot-required.pkgs"


def driver_packages(config: HostConfig) -> list[str]:
    packages = data.load("nvidia")["driver"]["packages"]
    return list(packages[config.nvidia_driver_install][config.nvidia_kernel_modules])


def kernel_module_package(config: HostConfig) -> str:
    return data.load("nvidia")["driver"]["kernel_module_package"][config.nvidia_kernel_modules]


def pinning_package(branch: int) -> str:
    return data.load("nvidia")["driver"]["pinning_package"].format(branch=branch)


def upstream_version(deb_version: str) -> str:
    """590.48.01-1 -> 590.48.01 (an epoch, if any, and the Debian revision dropped)."""
    return deb_version.split(":", 1)[-1].rsplit("-", 1)[0]


def cuda_paths(version: str) -> dict[str, str]:
    """The toolkit's package, home, nvcc, and the profile and linker files that expose it."""
    cuda = data.load("nvidia")["cuda"]
    home = cuda["home"].format(version=version)
    return {
        "package": cuda["toolkit_package"].format(dashed=version.replace(".", "-")),
        "home": home,
        "nvcc": f"{home}/bin/nvcc",
        "profile_script": cuda["profile_script"],
        "ld_conf": cuda["ld_conf"],
    }
