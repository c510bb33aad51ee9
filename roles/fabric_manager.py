"""NVIDIA Fabric Manager on NVSwitch boards: at exactly the driver's version, moved with
every driver change, its service enabled and running (NVLink Subnet Manager and ib_umad on
NVLink 5); nothing where the board has no NVSwitch fabric or a VM's hypervisor manages it."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import FileContents

from checks.facts import (
    NvidiaFabric,
    NvidiaGpus,
    NvidiaLoadedModule,
    SystemdUnitState,
    Virtualization,
    read_once,
)
from pyinfra_sglang import data
from pyinfra_sglang.driver.fabric import (
    FabricNeed,
    fabric_manager_candidates,
    fabric_manager_problems,
    fabric_need,
    installed_fabric_manager,
    subnet_manager_for,
    upstream,
)
from pyinfra_sglang.driver.nvidia import (
    all_kernel_module_packages,
    compute_cap_arch,
    installed_module_versions,
    kernel_module_packages,
)
from pyinfra_sglang.inventory import host_config
from roles.common import apt_get, apt_install, host_platform, service_running


class FabricManagerRefused(PyinfraError):
    """nvidia_driver_source = "host" on an NVSwitch host whose Fabric Manager is down or not
    at the driver's version."""


def current_need() -> FabricNeed:
    """Read at planning and again at execution (after the driver is installed, nvidia-smi
    tells the fabric state)."""
    return fabric_need(read_once(host, NvidiaFabric), read_once(host, Virtualization))


def install_at_driver_version_command(
    candidates: tuple[str, ...], module_packages: tuple[str, ...]
) -> StringCommand:
    """Shell run at execution: the installed kernel module package's version (the driver
    installed earlier in this run), the first of ``candidates`` apt has at that release,
    installed at it (a downgrade when the driver moved down); stops naming what is missing."""
    modules = " ".join(shlex.quote(m) for m in module_packages)
    names = " ".join(shlex.quote(n) for n in candidates)
    no_driver = (
        f"no NVIDIA kernel module package ({' or '.join(module_packages)}) is installed: "
        "Fabric Manager follows the driver's version"
    )
    missing = (
        f"{' or '.join(candidates)}: apt has no version at the driver's release $u in the "
        "configured repositories (is the NVIDIA repository or its mirror complete?)"
    )
    resolve = (
        f"v=; for m in {modules}; do "
        "s=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' \"$m\" 2>/dev/null) || continue; "
        'case "$s" in "ii "*) v=${s#ii }; v=${v# }; break;; esac; done; '
        f'[ -n "$v" ] || {{ echo {shlex.quote(no_driver)} >&2; exit 1; }}; '
        "u=${v#*:}; u=${u%-*}; fm=; fv=; "
        f"for n in {names}; do "
        'fv=$(apt-cache madison "$n" 2>/dev/null | awk -F\'|\' -v u="$u" '
        '\'{gsub(/ /, "", $2); s = $2; sub(/^[0-9]+:/, "", s); sub(/-[^-]*$/, "", s); '
        "if (s == u) { print $2; exit }}'); "
        '[ -n "$fv" ] && { fm=$n; break; }; done; '
        f'[ -n "$fm" ] || {{ echo "{missing}" >&2; exit 100; }};'
    )
    return StringCommand(
        resolve,
        apt_get("install", "--no-install-recommends", "--allow-downgrades", '"$fm=$fv"'),
        "&& systemctl daemon-reload",
    )


@operation()
def fabric_manager_at_driver_version(candidates: tuple[str, ...], module_packages: tuple[str, ...]):
    """Install Fabric Manager at exactly the installed driver's release, or move it there."""
    need = current_need()
    if not need.here:
        host.noop(f"no Fabric Manager here: {need.reason}")
        return
    installed = read_once(host, DebPackages)
    _, module_versions = installed_module_versions(installed, module_packages)
    fm = installed_fabric_manager(installed)
    if module_versions and fm and upstream(fm[1]) == upstream(max(module_versions)):
        host.noop(f"{fm[0]} {fm[1]} is at the driver's release ({need.reason})")
        return
    yield install_at_driver_version_command(candidates, module_packages)


@operation()
def fabric_manager_restarted(unit: str):
    """Restart Fabric Manager (when running) after it or the driver changed on this run."""
    if not current_need().here:
        host.noop("no Fabric Manager here")
        return
    yield StringCommand("systemctl try-restart", shlex.quote(unit))


@operation()
def fabric_manager_running(unit: str):
    """Fabric Manager's service enabled and running where it is needed."""
    need = current_need()
    if not need.here:
        host.noop(f"no Fabric Manager here: {need.reason}")
        return
    yield from service_running._inner(service=unit)


def needed_subnet_manager():
    """The NVLink Subnet Manager entry the fabric-attached GPUs need here (NVLink 5), or None."""
    if not current_need().here:
        return None
    return subnet_manager_for(
        compute_cap_arch(g.get("compute_cap")) for g in read_once(host, NvidiaGpus)
    )


@operation()
def subnet_manager_installed():
    """NVLink 5 (sm_100 and later) on NVSwitch: the NVLink Subnet Manager packages."""
    entry = needed_subnet_manager()
    if entry is None:
        host.noop("no NVLink 5 fabric here: no NVLink Subnet Manager")
        return
    installed = read_once(host, DebPackages)
    missing = [p for p in entry.packages if p not in installed]
    if not missing:
        host.noop(f"{', '.join(entry.packages)} installed")
        return
    yield apt_install(missing, "--no-install-recommends")


@operation()
def subnet_manager_modules():
    """NVLink 5: the kernel modules the subnet manager needs (mlx5_core, mlx5_ib, ib_umad),
    loaded at boot and now; in a container the outer host loads them."""
    entry = needed_subnet_manager()
    if entry is None:
        host.noop("no NVLink 5 fabric here: no kernel module to load")
        return
    container = read_once(host, Virtualization)["container"]
    if container:
        host.noop(f"in a container ({container}) the outer host loads the kernel modules")
        return
    content = "".join(f"{m}\n" for m in entry.kernel_modules)
    current = read_once(host, FileContents, path=entry.modules_load_path)
    if current is not None and "".join(f"{line}\n" for line in current) == content:
        host.noop(f"{entry.modules_load_path} loads {', '.join(entry.kernel_modules)}")
        return
    yield StringCommand(
        f"printf %s {shlex.quote(content)} > {shlex.quote(entry.modules_load_path)}",
        "&& modprobe -a",
        *(shlex.quote(m) for m in entry.kernel_modules),
    )


def refuse_host_fabric_manager(need: FabricNeed, config) -> None:
    """nvidia_driver_source = "host": the host's own FM must run at the loaded driver's
    release where it is needed; refused at planning otherwise, before any change."""
    if not need.here:
        return
    unit = data.nvidia().fabric_manager.service
    installed = read_once(host, DebPackages)
    # The driver's package when the host has one of the known names (a reboot-pending
    # module is the audit's driver-reboot-required), else the loaded module's release.
    _, module_versions = installed_module_versions(installed, all_kernel_module_packages(config))
    loaded = read_once(host, NvidiaLoadedModule)
    gpus = read_once(host, NvidiaGpus)
    driver = (
        upstream(max(module_versions))
        if module_versions
        else loaded["version"]
        if loaded
        else (gpus[0].get("driver_version") if gpus else None)
    )
    problems = fabric_manager_problems(
        read_once(host, SystemdUnitState, unit=unit),
        installed_fabric_manager(installed),
        driver,
    )
    if problems:
        raise FabricManagerRefused(
            f"host {host.name}: nvidia_driver_source = 'host' and this host needs NVIDIA "
            f"Fabric Manager ({need.reason}), but {'; '.join(problems)}. CUDA will not "
            f"initialize (error 802) until it runs: install the provider's Fabric Manager at "
            f"the driver's release ({driver or 'unknown'}) and start {unit}, or set "
            "nvidia_driver_source: managed. Nothing was changed."
        )


@deploy("NVIDIA Fabric Manager")
def fabric_manager() -> None:
    """Run NVIDIA Fabric Manager at the driver's release on NVSwitch boards.

    CUDA does not initialize there (error 802) until it runs, while nvidia-smi looks healthy.
    Where NVSwitches are found: its package at exactly the installed driver's release, its
    service enabled and running, and on NVLink 5 the subnet manager. Elsewhere: no-ops, with
    the reason.

    + nvidia_driver_branch: the driver's branch, whose release it follows
    + nvidia_driver_source: `host` checks the host's Fabric Manager instead
    """
    config = host_config(host)
    if config.uses_host_driver:
        refuse_host_fabric_manager(current_need(), config)
        return
    family = host_platform().driver_family
    unit = data.nvidia().fabric_manager.service
    install = fabric_manager_at_driver_version(
        name="Install Fabric Manager at the driver's release",
        candidates=fabric_manager_candidates(family, config.nvidia_driver_branch),
        module_packages=kernel_module_packages(family, config),
    )
    fabric_manager_restarted(
        name="Restart Fabric Manager after it changed", unit=unit, _if=install.did_change
    )
    fabric_manager_running(name="Enable and start Fabric Manager", unit=unit)
    subnet_manager_installed(name="Install the NVLink Subnet Manager (NVLink 5)")
    subnet_manager_modules(name="Load ib_umad at boot (NVLink 5)")
