"""NVIDIA driver: one branch locked with NVIDIA's pinning package, open kernel modules by
default, compute-only or full install, nouveau kept away, nvidia-persistenced on, and a
reboot (or a clear "reboot required") when the loaded module is not the installed one."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra import host, logger, state
from pyinfra.api import QuoteString, StringCommand, deploy, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.server import Which

from checks.facts import AptPolicy, NvidiaGpus, NvidiaLoadedModule, Virtualization, read_once
from pyinfra_sglang import data
from pyinfra_sglang.driver.fabric import fabric_manager_candidates
from pyinfra_sglang.driver.nvidia import (
    REBOOT_REQUIRED,
    REBOOT_REQUIRED_PKGS,
    compute_cap_arch,
    driver_mismatches,
    driver_packages,
    installed_module_versions,
    installed_on_branch,
    kernel_module_packages,
    newer_on_branch,
    packages_off_branch,
    pinning_package,
    pinning_prefix,
    upstream_version,
)
from pyinfra_sglang.gpus import refuse_other_gpu_model
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.paths import template
from roles.common import (
    apt_get,
    apt_install,
    host_platform,
    installed_software,
    running_driver,
    service_running,
    template_file,
)
from roles.driver_rollout import driver_rollout, register_rollout, rollout_facts, rollout_need
from roles.fabric_manager import current_need as fabric_current_need
from roles.fabric_manager import install_at_driver_version_command
from roles.host_driver import host_keeps, refuse_foreign_driver, refuse_host_driver
from roles.reboot import reboot_and_wait
from roles.secure_boot import mok_key_pair_installed, secure_boot_preflight


def stale_driver_packages(
    installed: dict[str, list[str]],
    entries: list[tuple[str, ...]],
    branch: int,
    version: str | None = None,
) -> list[tuple[str, ...]]:
    """Entries none of whose candidates is installed on ``branch`` (at ``version``, when
    the inventory locks one)."""
    return [
        entry
        for entry in entries
        if not any(installed_on_branch(installed, name, branch, version) for name in entry)
    ]


def resolve_on_host(
    entry: tuple[str, ...], branch: int, variable: str, version: str | None = None
) -> str:
    """Shell that sets ``variable`` to the first of ``entry`` apt has a version of on
    ``branch`` (exactly ``version``, when given) for (read from the repositories' own
    metadata at execution, after the pin and the lists are in place), or stops naming
    every candidate."""
    names = " ".join(shlex.quote(name) for name in entry)
    wanted = f"driver {version}" if version else f"driver branch {branch}"
    missing = (
        f"{' or '.join(entry)}: apt has no version on {wanted} in the "
        "configured repositories (is the NVIDIA repository or its mirror complete?)"
    )
    # grep -E: only the dots need escaping (GNU grep warns about a stray "\-").
    track = version.replace(".", "\\.") + "-" if version else f"{branch}\\."
    return (
        f"{variable}=; for name in {names}; do "
        "if apt-cache policy \"$name\" 2>/dev/null | sed -n 's/^ *Candidate: //p' "
        f"| grep -Eq '^([0-9]+:)?{track}'; then {variable}=$name; break; fi; done; "
        f'[ -n "${variable}" ] || {{ echo {shlex.quote(missing)} >&2; exit 100; }}'
    )


def install_on_branch_command(
    entries: list[tuple[str, ...]],
    moving: list[str],
    branch: int,
    version: str | None = None,
) -> StringCommand:
    """One apt transaction: every entry resolved on the host, and the installed packages of
    another branch moved along (the pin picks the version; older is a downgrade)."""
    variables = [f"pkg{index}" for index in range(len(entries))]
    resolve = "; ".join(
        resolve_on_host(entry, branch, variable, version)
        for entry, variable in zip(entries, variables, strict=True)
    )
    return StringCommand(
        f"{resolve};",
        apt_get(
            "install",
            "--no-install-recommends",
            "--allow-downgrades",
            *(f'"${variable}"' for variable in variables),
            *(QuoteString(name) for name in moving),
        ),
    )


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


def pin_commands(branch: int, version: str | None = None) -> list[StringCommand]:
    """The command that installs the branch's (or release's) pin in place of any other; []
    when it is the only one installed."""
    installed = read_once(host, DebPackages)
    wanted = pinning_package(branch, version)
    others = sorted(p for p in installed if p.startswith(pinning_prefix()) and p != wanted)
    if wanted in installed and not others:
        return []
    # The pins conflict with each other: swap them in one apt transaction ("pkg-" removes).
    return [apt_install([wanted, *(f"{p}-" for p in others)])]


@operation()
def driver_branch_pin(branch: int, version: str | None = None):
    """Install nvidia-driver-pinning-<branch> (nvidia-driver-pinning-<version> for an exact
    release), replacing any other pin, branch or version."""
    commands = pin_commands(branch, version)
    if not commands:
        host.noop(f"{pinning_package(branch, version)} is installed")
        return
    yield from commands


def updates_within_branch(installed: dict[str, list[str]], policy: dict, branch: int) -> list[str]:
    """Installed driver packages apt has a newer release of ``branch`` for."""
    return sorted(
        name
        for name, versions in installed.items()
        if name in policy
        and any(newer_on_branch(v, policy[name]["candidate"], branch) for v in versions)
    )


def installed_driver_names(installed: dict[str, list[str]], entries, branch: int) -> list[str]:
    return sorted(
        name for entry in entries for name in entry if installed_on_branch(installed, name, branch)
    )


@dataclass(frozen=True)
class DriverChange:
    """What the driver packages need on this host: entries to install or move, installed
    packages of another branch to take along, newer releases of the branch to take."""

    stale: list[tuple[str, ...]]
    moving: list[str]
    updates: list[str]
    removing: tuple[str, ...] = ()  # the distribution's packages (nvidia_driver_remove_foreign)

    def __bool__(self) -> bool:
        return bool(self.stale or self.moving or self.updates or self.removing)


def driver_change(
    entries: list[tuple[str, ...]],
    branch: int,
    update_within_branch: bool,
    version: str | None = None,
    removing: tuple[str, ...] = (),
) -> DriverChange:
    """Read from the current host's facts: the operation installs it, the deploy decides the
    reboot from it (the facts are read once per host). With ``version``, every driver package
    not at it is stale or moves (the inventory forbids updates within the branch then)."""
    installed = read_once(host, DebPackages)
    stale = stale_driver_packages(installed, entries, branch, version)
    named = {name for entry in entries for name in entry}
    removing = tuple(name for name in removing if name not in named)
    moving = [
        name
        for name in packages_off_branch(installed, branch, version)
        if name not in named and name not in removing
    ]
    updates: list[str] = []
    if update_within_branch and not stale and not moving:
        names = installed_driver_names(installed, entries, branch)
        policy = read_once(host, AptPolicy, packages=names)
        updates = updates_within_branch(installed, policy, branch)
    return DriverChange(stale, moving, updates, removing)


@operation()
def driver_packages_on_branch(
    entries: list[tuple[str, ...]],
    branch: int,
    update_within_branch: bool = False,
    version: str | None = None,
    removing: tuple[str, ...] = (),
    removing_dkms: tuple[str, ...] = (),
):
    """Install the driver packages, or move them to ``branch`` together with every other
    installed driver package still on another branch (NVIDIA's metapackages depend with
    >=, so apt would leave those where they are); with ``update_within_branch``, also to
    the newest release of the branch apt offers. ``removing``: the distribution's driver
    packages, purged first; ``removing_dkms``: NVIDIA modules DKMS holds for no package
    (``nvidia/<version>``), removed before the install."""
    change = driver_change(entries, branch, update_within_branch, version, removing)
    commands = package_commands(change, entries, branch, version, removing_dkms)
    if not commands:
        newest = " (the newest apt offers)" if update_within_branch else ""
        where = f"at {version}" if version else f"on branch {branch}"
        host.noop(f"{', '.join(' or '.join(e) for e in entries)} {where}{newest}")
        return
    yield from commands


def package_commands(
    change: DriverChange,
    entries: list[tuple[str, ...]],
    branch: int,
    version: str | None = None,
    removing_dkms: tuple[str, ...] = (),
) -> list[StringCommand]:
    """The commands that carry ``change`` out; [] for none."""
    commands = []
    # Purged first, in their own transaction: the distribution's packages ship the same
    # files as NVIDIA's (nvidia-smi, libcuda) without a Conflicts apt could order by.
    if change.removing:
        commands.append(apt_get("purge", *(QuoteString(name) for name in change.removing)))
    for module in removing_dkms:
        commands.append(StringCommand("dkms", "remove", QuoteString(module), "--all"))
    if change:
        commands.append(install_on_branch_command(entries, change.moving, branch, version))
    return commands


@operation()
def nvidia_smi_installed(packages: list[tuple[str, ...]]):
    """After the driver packages: nvidia-smi is on PATH, or the run stops naming what was
    installed (a package set that ships no nvidia-smi is a wrong name in the data)."""
    found = read_once(host, Which, command="nvidia-smi")
    if found:
        host.noop(f"nvidia-smi is at {found}")
        return
    installed = ", ".join(" or ".join(entry) for entry in packages)
    yield (
        "command -v nvidia-smi >/dev/null || { echo "
        + shlex.quote(f"none of the installed driver packages ({installed}) put nvidia-smi on PATH")
        + " >&2; exit 1; }"
    )


@operation()
def rebuild_initramfs():
    """update-initramfs, so the nouveau blacklist holds from early boot."""
    container = read_once(host, Virtualization)["container"]
    if container:
        host.noop(f"in a container ({container}) the outer host boots the kernel")
        return
    if not read_once(host, Which, command="update-initramfs"):
        host.noop("update-initramfs is not installed: no initramfs to rebuild")
        return
    yield "update-initramfs -u"


@operation()
def driver_reboot(
    module_packages: tuple[str, ...],
    allow_reboot: bool,
    changing: bool,
    reboot_timeout_s: int = 1800,
):
    """Reboot when the kernel does not run the installed driver and the inventory allows it;
    otherwise mark the host "reboot required" (/run/reboot-required) and say so."""
    loaded = read_once(host, NvidiaLoadedModule)
    module_package, versions = installed_module_versions(
        read_once(host, DebPackages), module_packages
    )
    decision = decide_driver_reboot(
        loaded=loaded["version"] if loaded else None,
        installed=upstream_version(max(versions)) if versions else None,
        changing=changing,
        container=read_once(host, Virtualization)["container"],
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
    if read_once(host, File, path=REBOOT_REQUIRED):
        host.noop(f"already marked reboot-required: {decision.reason}")
        return
    yield StringCommand(
        "touch",
        QuoteString(REBOOT_REQUIRED),
        "&& echo",
        QuoteString(module_package or module_packages[0]),
        ">>",
        QuoteString(REBOOT_REQUIRED_PKGS),
    )


def fabric_manager_commands(family: str, config) -> list[StringCommand]:
    """Fabric Manager moved to the new driver's release and restarted, in the same turn as
    the driver, where the board needs it."""
    if not fabric_current_need().here:
        return []
    return [
        install_at_driver_version_command(
            fabric_manager_candidates(family, config.nvidia_driver_branch),
            kernel_module_packages(family, config),
        ),
        StringCommand("systemctl try-restart", QuoteString(data.nvidia().fabric_manager.service)),
    ]


class RolloutNeedsReboot(PyinfraError):
    """A serving host's driver changes, the kernel must load it, and no reboot is allowed."""


def rollout_reboot_commands(config, module_packages: tuple[str, ...]) -> list:
    """The reboot of a host whose driver changes in its turn: none in a container (the outer
    host loads the module); refused at planning where a reboot is needed and not allowed,
    as the host could never pass its validation and rejoin."""
    loaded = read_once(host, NvidiaLoadedModule)
    _, versions = installed_module_versions(read_once(host, DebPackages), module_packages)
    decision = decide_driver_reboot(
        loaded=loaded["version"] if loaded else None,
        installed=upstream_version(max(versions)) if versions else None,
        changing=True,
        container=read_once(host, Virtualization)["container"],
        allow_reboot=config.allow_reboot,
    )
    if decision.action == "required":
        raise RolloutNeedsReboot(
            f"host {host.name}: its driver changes while it serves, and the new module runs "
            f"only after a reboot ({decision.reason}); allow_reboot = false: set allow_reboot "
            "= true to let its turn reboot it, stop its server first, or set "
            'driver_rollout_max_unavailable = "off" to install it in place and reboot it '
            "yourself. Nothing was changed."
        )
    if decision.action == "none":
        return []
    return list(reboot_and_wait._inner(timeout=config.reboot_timeout_s))


class DriverRefusedForGpus(PyinfraError):
    """The GPUs the host has need another driver branch or kernel module flavor."""


def gpus_text(gpus: list[dict]) -> str:
    """'GPU 0 (NVIDIA H200)', 'GPUs 0, 1 (NVIDIA H200)'."""
    indexes = ", ".join(str(gpu.get("index", "?")) for gpu in gpus)
    names = ", ".join(sorted({str(gpu.get("name") or "unnamed") for gpu in gpus}))
    return f"GPU{'s' if len(gpus) > 1 else ''} {indexes} ({names})"


def refuse_driver_for_gpus(config) -> None:
    """A driver branch or module flavor that cannot run a GPU nvidia-smi reports (a driver is
    there already: a GPU upgrade, a re-apply) is refused, naming the GPUs, the field and what
    is allowed (data/nvidia.toml [[driver.architectures]])."""
    by_mismatch: dict = {}
    for gpu in read_once(host, NvidiaGpus):
        arch = compute_cap_arch(gpu.get("compute_cap"))
        if not arch:
            continue
        for mismatch in driver_mismatches(
            arch, config.nvidia_driver_branch, config.nvidia_kernel_modules
        ):
            by_mismatch.setdefault(mismatch, []).append(gpu)
    if not by_mismatch:
        return
    lines = [
        f"host {host.name}: {m.field} = {getattr(config, m.field)!r} cannot run "
        f"{gpus_text(gpus)}: {m.message}; allowed: {m.allowed}"
        for m, gpus in by_mismatch.items()
    ]
    raise DriverRefusedForGpus("\n".join(lines) + "\nNothing was changed.")


def host_driver_in_use(config) -> None:
    """Host mode: the running driver, checked at planning, is used as it is."""
    running = refuse_host_driver(config)
    host_keeps(
        name="Use the host's NVIDIA driver",
        what=(
            f"driver {running.version} ({running.flavor or 'flavor unknown'}) from {running.origin}"
        ),
        reason='nvidia_driver_source = "host" leaves it as it is',
    )


@deploy("NVIDIA driver")
def nvidia_driver() -> None:
    """Install the pinned NVIDIA driver, and reboot into it where allowed.

    Refuses at planning a driver the GPUs cannot run, Secure Boot without an enrolled key, and
    another installer's driver.

    + nvidia_driver_branch: the branch (or `nvidia_driver_version`'s release) pinned
    + nvidia_driver_install: `compute` or `full`
    + nvidia_kernel_modules: `open` or `proprietary`
    + nvidia_driver_update_within_branch: the branch's newest too
    + nvidia_driver_remove_foreign: purge another installer's driver
    + nvidia_mok_key_file: the MOK that signs the module
    + allow_reboot: reboot into a new driver
    + nvidia_driver_source: `host` only checks the host's driver
    + driver_rollout_max_unavailable: hosts out at once
    """
    config = host_config(host)
    installed_software()
    running_driver(*rollout_facts())
    if config.uses_host_driver:
        host_driver_in_use(config)
        return
    family = host_platform().driver_family
    # Refused here, at planning (before any change): GPUs the branch or flavor cannot run,
    # GPUs other than expected_gpu_model, NVIDIA software another installer left (unless
    # the inventory asks for the switch), Secure Boot on without an enrolled key to sign
    # the module with.
    refuse_driver_for_gpus(config)
    refuse_other_gpu_model(host.name, config.expected_gpu_model, read_once(host, NvidiaGpus))
    foreign = refuse_foreign_driver(config)
    removing = tuple(package.name for package in foreign.packages)
    signing = secure_boot_preflight(config)
    packages = driver_packages(family, config)
    branch = config.nvidia_driver_branch
    version = config.nvidia_driver_version
    # Within-branch updates change the driver too: the reboot handling follows them.
    change = driver_change(
        packages, branch, config.nvidia_driver_update_within_branch, version, removing
    )
    changing = bool(change or foreign.dkms)
    # A serving host's change goes through its turn of the fleet's rollout.
    need = rollout_need(changing)
    if need.rolls:
        register_rollout(state, need)

    if signing is not None:
        mok_key_pair_installed(
            name="Put the MOK key pair where DKMS signs the module from",
            key_file=str(config.nvidia_mok_key_file),
            cert_file=str(config.nvidia_mok_cert_file),
            family=family,
        )
    target = f"driver {version}" if version else f"driver branch {branch}"
    if need.rolls:
        commands = []
        if changing:
            commands = [
                *pin_commands(branch, version),
                *package_commands(change, packages, branch, version, foreign.dkms),
                *fabric_manager_commands(family, config),
                *rollout_reboot_commands(config, kernel_module_packages(family, config)),
            ]
        driver_rollout(
            name=f"Upgrade to the {target} in this host's turn out of service",
            target=need.record.target if need.record and not changing else target,
            commands=commands,
            operator_out=need.operator_out,
            record=need.record,
        )
    else:
        driver_branch_pin(
            name=f"Lock the driver to {version or f'branch {branch}'}",
            branch=branch,
            version=version,
        )
        removed = ", ".join([*removing, *foreign.dkms])
        driver_packages_on_branch(
            name=(
                f"Install the {config.nvidia_driver_install} driver "
                f"({config.nvidia_kernel_modules} modules)"
                + (f", removing {removed}" if removed else "")
            ),
            entries=packages,
            branch=branch,
            update_within_branch=config.nvidia_driver_update_within_branch,
            version=version,
            removing=removing,
            removing_dkms=foreign.dkms,
        )
    nvidia_smi_installed(name="Check that nvidia-smi is installed", packages=packages)
    blacklist = template_file(
        name="Blacklist nouveau",
        src=template("nouveau-blacklist.conf.j2"),
        dest=data.nvidia().nouveau.blacklist_path,
        user="root",
        group="root",
        mode="644",
    )
    rebuild_initramfs(name="Rebuild the initramfs without nouveau", _if=blacklist.did_change)
    service_running(name="Enable nvidia-persistenced", service="nvidia-persistenced.service")
    if need.rolls:
        return  # rebooted in its turn, where it had to
    driver_reboot(
        name="Reboot into the installed driver",
        module_packages=kernel_module_packages(family, config),
        allow_reboot=config.allow_reboot,
        changing=changing,
        reboot_timeout_s=config.reboot_timeout_s,
    )
