"""The driver a host already holds, read at planning (before any change): with
`nvidia_driver_source = "host"` it is used as it is, after the checks of
pyinfra_sglang/driver/host_driver.py; in managed mode, NVIDIA software another installer left
(the distribution's archive, a runfile, orphaned DKMS modules) is refused unless the
inventory asks for the switch."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages

from checks.facts import (
    DkmsState,
    HostDriverState,
    NvidiaGpus,
    NvidiaLoadedModule,
    NvidiaSmiPackage,
    Virtualization,
    read_once,
)
from checks.flash_attn_decision import flash_attn_decision
from pyinfra_sglang.driver.host_driver import (
    HOST,
    ForeignDriver,
    RunningDriver,
    foreign_driver,
    host_driver_problems,
    minor_version_note,
    running_driver,
)
from pyinfra_sglang.inventory import HostConfig


class HostDriverRefused(PyinfraError):
    """The host's own driver or toolkits cannot serve the inventory (host mode)."""


class ForeignDriverRefused(PyinfraError):
    """Managed mode on a host whose NVIDIA driver another installer put there."""


def host_running_driver() -> RunningDriver:
    """The current host's running driver and where it came from."""
    smi = read_once(host, NvidiaGpus)
    return running_driver(
        loaded=read_once(host, NvidiaLoadedModule),
        gpus=smi,
        smi_package=read_once(host, NvidiaSmiPackage) if smi else None,
        installed=read_once(host, DebPackages),
        runfile=read_once(host, HostDriverState)["runfile"],
        virtualization=read_once(host, Virtualization),
    )


def refuse_host_driver(config: HostConfig) -> RunningDriver:
    """Host mode, at planning: refuse (naming the host, the field and what is allowed) a
    driver or toolkit set that cannot serve the inventory; warn where the driver runs the
    CUDA builds only through minor-version compatibility."""
    running = host_running_driver()
    problems = host_driver_problems(
        running,
        read_once(host, NvidiaGpus),
        config.cuda_version,
        flash_attn_decision(config).build,
        read_once(host, HostDriverState)["toolkits"],
    )
    if problems:
        lines = [f"host {host.name}: {p.field}: {p.message}" for p in problems]
        raise HostDriverRefused("\n".join(lines) + "\nNothing was changed.")
    note = minor_version_note(config.cuda_version, running.version)
    if note:
        logger.warning(f"{host.print_prefix}{HOST}: {note}")
    return running


@operation()
def host_keeps(what: str, reason: str):
    """Nothing to do: ``what`` is the host's own business (``reason`` says why)."""
    host.noop(f"{what}: {reason}")
    return
    yield  # an operation is a generator


def refuse_foreign_driver(config: HostConfig) -> ForeignDriver:
    """Managed mode, at planning: NVIDIA software another installer left is refused before
    any change, naming what was found and both ways out; with
    nvidia_driver_remove_foreign, what the driver's apt transaction removes (a runfile's
    install is still refused: only its own uninstaller undoes it)."""
    found = foreign_driver(
        read_once(host, DebPackages),
        read_once(host, DkmsState),
        read_once(host, HostDriverState)["runfile"],
    )
    if not found or (config.nvidia_driver_remove_foreign and found.removable()):
        return found
    lines = [
        f"host {host.name}: nvidia_driver_source = 'managed' would install NVIDIA's driver "
        "packages over NVIDIA software another installer put there:",
        *(f"  - {line}" for line in found.found()),
        "Ways out:",
        *(f"  - {way}" for way in found.ways_out()),
        "Nothing was changed.",
    ]
    raise ForeignDriverRefused("\n".join(lines))
