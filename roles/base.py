"""Base role: a supported platform, build prerequisites, kernel headers, and an
unattended-upgrades blacklist that keeps the NVIDIA driver and CUDA where we put them."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation

from checks.facts import KernelHeaders, Virtualization, read_once
from pyinfra_sglang import data
from pyinfra_sglang.paths import template
from roles.common import (
    apt_install,
    apt_update,
    ensure_packages,
    host_platform,
    installed_software,
    template_file,
)

UNATTENDED_UPGRADES_BLACKLIST = "/etc/apt/apt.conf.d/51pyinfra-sglang-nvidia"


@operation()
def kernel_headers(package_template: str = "linux-headers-{kernel_release}"):
    """Install the headers DKMS needs for the running kernel, where the distro ships them."""
    headers = read_once(host, KernelHeaders, package_template=package_template)
    package, release = headers["package"], headers["kernel_release"]
    if package == "-":
        host.noop(f"kernel {release} names no distro flavor: no headers metapackage follows it")
        return
    if headers["installed"]:
        host.noop(f"{package} is installed")
        return
    container = read_once(host, Virtualization)["container"]
    if container:
        host.noop(
            f"{package} not installed: in a container ({container}) kernel {release} "
            "and its modules belong to the outer host"
        )
        return
    if headers["candidate"] is None and headers["apt_lists_present"]:
        host.noop(
            f"{package} is not shipped by the distro for kernel {release}; the driver's "
            "DKMS build needs headers from wherever this kernel came from"
        )
        return
    if not headers["apt_lists_present"]:
        # apt's lists were cleaned (cloud images do): only after an update can apt say
        # whether the distro ships these headers; a kernel it does not ship is no error.
        quoted = shlex.quote(package)
        yield StringCommand(
            apt_update(),
            f"&& if apt-cache show {quoted} >/dev/null 2>&1; then",
            apt_install([package], "--no-install-recommends"),
            f"; else echo {shlex.quote(f'{package} is not shipped by the distro')}; fi",
        )
        return
    yield apt_install([package], "--no-install-recommends")


@deploy("Base")
def base() -> None:
    """Refuse an unsupported platform, then install build tools and kernel headers.

    Runs first: a platform missing from data/platforms.toml stops the run before any host
    changes. Installs build tools, DKMS, curl, gnupg and pciutils, the running kernel's headers
    and its flavor's headers metapackage (DKMS then builds the driver for later kernels too),
    and keeps unattended-upgrades off the `nvidia-*`, `libnvidia-*` and `cuda-*` packages.
    """
    host_platform()
    installed_software()
    base_data = data.platforms().base
    ensure_packages("Install build prerequisites", list(base_data.packages))
    kernel_headers(
        name="Install headers for the running kernel",
        package_template=base_data.kernel_headers_package,
    )
    # DKMS builds the driver only for kernels whose headers are installed: the flavor's
    # metapackage brings the next kernel's headers with it, or that kernel boots without it.
    kernel_headers(
        name="Install the headers metapackage of the kernel's flavor",
        package_template=base_data.kernel_headers_metapackage,
    )
    template_file(
        name="Keep unattended-upgrades off the NVIDIA driver and CUDA",
        src=template("apt-nvidia-no-unattended-upgrades.conf.j2"),
        dest=UNATTENDED_UPGRADES_BLACKLIST,
        prefixes=base_data.unattended_upgrades_blacklist,
        user="root",
        group="root",
        mode="644",
    )
