"""NVIDIA DCGM (inventory ``nvidia_dcgm_install``): DCGM 4 from NVIDIA's repository for the
CUDA major of ``cuda_version`` (data/dcgm.toml), its ``nvidia-dcgm`` service enabled and
running; the audit runs ``dcgmi diag`` where it is present (finding ``dcgm-diag``)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.deb import DebPackages

from checks.facts import read_once
from pyinfra_sglang import data
from pyinfra_sglang.inventory import host_config
from roles.common import apt_install, apt_update, service_running


def dcgm_plan(install: bool, host_driver: bool, cuda_version: str) -> tuple[str | None, str]:
    """DCGM's package for this host, or None and why nothing is installed."""
    if not install:
        return None, "no DCGM (nvidia_dcgm_install is off)"
    if host_driver:
        return None, (
            'nvidia_dcgm_install: nvidia_driver_source = "host" installs nothing from '
            "NVIDIA's repository; DCGM stays as the host has it"
        )
    packages = data.dcgm().install.packages
    major = cuda_version.split(".", 1)[0]
    if major not in packages:
        raise ValueError(
            f"nvidia_dcgm_install: no DCGM package for CUDA {cuda_version} (major {major}); "
            f"data/dcgm.toml lists CUDA majors {', '.join(sorted(packages))}"
        )
    return packages[major], f"DCGM for CUDA {major}"


@operation()
def dcgm_installed(package: str):
    """DCGM's package with its recommends, after refreshing apt's lists; a host that has it
    is not touched.

    + package: the package of data/dcgm.toml [install] for the CUDA major
    """
    if package in read_once(host, DebPackages):
        host.noop(f"{package} installed")
        return
    yield apt_update()
    recommends = data.dcgm().install.install_recommends
    yield apt_install(
        [package], "--install-recommends" if recommends else "--no-install-recommends"
    )


@operation()
def dcgm_running(unit: str):
    """DCGM's host engine service enabled and running.

    + unit: its systemd unit (data/dcgm.toml [install] service)
    """
    yield from service_running._inner(service=unit)


@deploy("DCGM")
def dcgm() -> None:
    """Install NVIDIA DCGM and run its host engine, where the inventory asks for it.

    DCGM 4 for the CUDA major of `cuda_version`, from NVIDIA's repository, with its
    `nvidia-dcgm` service enabled and running.

    + nvidia_dcgm_install: on to install it; off changes nothing
    + cuda_version: its major picks the package (`-cuda12`, `-cuda13`)
    + nvidia_driver_source: `host` changes nothing
    """
    config = host_config(host)
    package, reason = dcgm_plan(
        config.nvidia_dcgm_install, config.uses_host_driver, config.cuda_version
    )
    if package is None:
        host.noop(reason)
        return
    dcgm_installed(name=f"Install DCGM ({package})", package=package)
    dcgm_running(name="DCGM's host engine enabled and running", unit=data.dcgm().install.service)
