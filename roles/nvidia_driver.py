"""NVIDIA driver: one branch locked with NVIDIA's pinning package, open kernel modules by
default, compute-only or full install, nouveau kept away, nvidia-persistenced on, and a
reboot (or a clear "reboot required") when the loaded module is not the installed one."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, deploy, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.server import Which
from pyinfra.operations import files, systemd

from checks.facts import NvidiaLoadedModule, Virtualization
from pyinfra_sglang import data
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.nvidia import (
    REBOOT_REQUIRED,
    REBOOT_REQUIRED_PKGS,
    driver_packages,
    kernel_module_package,
    pinning_package,
    upstream_version,
)
from pyinfra_sglang.paths import template
from roles.common import apt_install
from roles.reboot import reboot_and_wait


def stale_driver_packages(
    installed: dict[str, list[str]], packages: list[str], branch: int
) -> list[str]:
    """Packages that are missing or not on ``branch``."""
    return [
        package
        for package in packages
        if not any(upstream_version(v).startswith(f"{branch}.") for v in installed.get(package, []))
    ]


@dataclass(frozen=True)
class RebootDecision:
    action: str  # "none", "reboot" or "required"
    reason: str


def decide_driver_reboot(
    loaded: str | None,
    installed: str | None,
    changing: bool,
    container: str | None,
    allow_reboot: bool,
) -> RebootDecision:
    """Does the kernel need a reboot to run the installed driver?

    ``loaded``: version in /proc/driver/nvidia/version (None: no module loaded);
    ``installed``: upstream version of the kernel module package (None: not installed);
    ``changing``: this run installs or moves the driver packages.
    """
    if container:
        return RebootDecision(
            "none", f"in a container ({container}) the outer host loads the kernel module"
        )
    if changing:
        reason = (
            f"the driver packages change on this run; the kernel has "
            f"{loaded or 'no NVIDIA module'} loaded"
        )
    elif installed is None:
        return RebootDecision("none", "no NVIDIA kernel module package is installed")
    elif loaded == installed:
        return RebootDecision("none", f"the loaded module is the installed one ({loaded})")
    else:
        reason = f"the kernel has {loaded or 'no NVIDIA module'} loaded, {installed} is installed"
    return RebootDecision("reboot" if allow_reboot else "required", reason)


@operation()
def driver_branch_pin(branch: int):
    """Install nvidia-driver-pinning-<branch>, replacing any other branch's pin."""
    installed = host.get_fact(DebPackages)
    wanted = pinning_package(branch)
    prefix = data.load("nvidia")["driver"]["pinning_package"].format(branch="")
    others = sorted(p for p in installed if p.startswith(prefix) and p != wanted)
    if wanted in installed and not others:
        host.noop(f"{wanted} is installed")
        return
    # The pins conflict with each other: swap them in one apt transaction ("pkg-" removes).
    yield apt_install([wanted, *(f"{p}-" for p in others)])


@operation()
def driver_packages_on_branch(packages: list[str], branch: int):
    """Install the driver packages, or move them to ``branch`` (the pin picks the version;
    moving to an older branch is a downgrade)."""
    stale = stale_driver_packages(host.get_fact(DebPackages), packages, branch)
    if not stale:
        host.noop(f"{', '.join(packages)} are on branch {branch}")
        return
    yield apt_install(packages, "--no-install-recommends", "--allow-downgrades")


@operation()
def rebuild_initramfs():
    """update-initramfs, so the nouveau blacklist holds from early boot."""
    container = host.get_fact(Virtualization)["container"]
    if container:
        host.noop(f"in a container ({container}) the outer host boots the kernel")
        return
    if not host.get_fact(Which, command="update-initramfs"):
        host.noop("update-initramfs is not installed: no initramfs to rebuild")
        return
    yield "update-initramfs -u"


@operation()
def driver_reboot(
    module_package: str, allow_reboot: bool, changing: bool, reboot_timeout_s: int = 1800
):
    """Reboot when the kernel does not run the installed driver and the inventory allows it;
    otherwise mark the host "reboot required" (/run/reboot-required) and say so."""
    loaded = host.get_fact(NvidiaLoadedModule)
    versions = host.get_fact(DebPackages).get(module_package, [])
    decision = decide_driver_reboot(
        loaded=loaded["version"] if loaded else None,
        installed=upstream_version(max(versions)) if versions else None,
        changing=changing,
        container=host.get_fact(Virtualization)["container"],
        allow_reboot=allow_reboot,
    )
    if decision.action == "none":
        host.noop(decision.reason)
        return
    if decision.action == "reboot":
        logger.warning(f"{host.print_prefix}rebooting for the NVIDIA driver: {decision.reason}")
        yield from reboot_and_wait._inner(timeout=reboot_timeout_s)
        return
    logger.warning(
        f"{host.print_prefix}REBOOT REQUIRED for the NVIDIA driver: {decision.reason} "
        "(set allow_reboot: true to let the deploy reboot)"
    )
    if host.get_fact(File, path=REBOOT_REQUIRED):
        host.noop(f"already marked reboot-required: {decision.reason}")
        return
    yield StringCommand(
        "touch",
        QuoteString(REBOOT_REQUIRED),
        "&& echo",
        QuoteString(module_package),
        ">>",
        QuoteString(REBOOT_REQUIRED_PKGS),
    )


@deploy("NVIDIA driver")
def nvidia_driver() -> None:
    config = host_config(host)
    packages = driver_packages(config)
    branch = config.nvidia_driver_branch
    changing = bool(stale_driver_packages(host.get_fact(DebPackages), packages, branch))

    driver_branch_pin(name=f"Lock the driver to branch {branch}", branch=branch)
    driver_packages_on_branch(
        name=(
            f"Install the {config.nvidia_driver_install} driver "
            f"({config.nvidia_kernel_modules} modules)"
        ),
        packages=packages,
        branch=branch,
    )
    blacklist = files.template(
        name="Blacklist nouveau",
        src=template("nouveau-blacklist.conf.j2"),
        dest=data.load("nvidia")["nouveau"]["blacklist_path"],
        user="root",
        group="root",
        mode="644",
    )
    rebuild_initramfs(name="Rebuild the initramfs without nouveau", _if=blacklist.did_change)
    systemd.service(
        name="Enable nvidia-persistenced",
        service="nvidia-persistenced.service",
        running=True,
        enabled=True,
    )
    driver_reboot(
        name="Reboot into the installed driver",
        module_package=kernel_module_package(config),
        allow_reboot=config.allow_reboot,
        changing=changing,
        reboot_timeout_s=config.reboot_timeout_s,
    )
