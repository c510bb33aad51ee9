"""Helpers every role uses: the host's platform, and apt-get run so that a busy apt (data/apt.toml:
unattended-upgrades on a fresh image) is waited for rather than failed on."""

from __future__ import annotations

import hashlib
import io
import shlex
from collections.abc import Sequence

from pyinfra import host, state
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.api.util import get_template
from pyinfra.facts.apt import noninteractive_apt
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Arch, LinuxDistribution, Which
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import files, systemd
from pyinfra.operations.util.files import ensure_mode_int

from checks.facts import (
    DkmsState,
    FileStates,
    HostDriverState,
    KernelHeaders,
    NvidiaGpus,
    NvidiaLoadedModule,
    SecureBootState,
    Virtualization,
    read_once,
    read_together,
)
from checks.host_context import run_on_host, transfer_arguments
from pyinfra_sglang import data
from pyinfra_sglang.driver.platform import Platform, resolve_platform


def host_platform() -> Platform:
    """The current host's platform; refuses an unsupported distro or arch before any change."""
    # What machine this is, in one command: the release files, uname, systemd-detect-virt.
    read_together(host, (LinuxDistribution, {}), (Arch, {}), (Virtualization, {}))
    release = read_once(host, LinuxDistribution)["release_meta"]
    return resolve_platform(host.name, release, read_once(host, Arch))


def installed_software() -> None:
    """Read what dpkg and DKMS say is installed in one command (the packages, DKMS's modules,
    what other NVIDIA installers left), and the running kernel's headers (package and
    metapackage: dpkg-query and apt-cache) in another, each when first needed."""
    base = data.platforms().base
    read_together(host, (DebPackages, {}), (DkmsState, {}), (HostDriverState, {}))
    read_together(
        host,
        (KernelHeaders, {"package_template": base.kernel_headers_package}),
        (KernelHeaders, {"package_template": base.kernel_headers_metapackage}),
    )


def running_driver(*also: tuple[type, dict]) -> None:
    """Read the NVIDIA driver as the host runs it in one command, when first needed:
    nvidia-smi's GPUs and where it is, the loaded module, Secure Boot and the module's
    signer; ``also``: more facts the driver's change is decided by (its rollout's)."""
    read_together(
        host,
        (NvidiaGpus, {}),
        (Which, {"command": "nvidia-smi"}),
        (NvidiaLoadedModule, {}),
        (SecureBootState, {}),
        *also,
    )


def apt_lock_wait() -> str:
    """apt-get's option that waits up to data/apt.toml's ``lock_timeout_s`` for dpkg's locks."""
    return f"-o DPkg::Lock::Timeout={data.apt().lock_timeout_s}"


def apt_get(*args: str | QuoteString) -> StringCommand:
    """Every apt-get the roles run that installs or removes: non-interactive, keeping changed
    config files (--force-confdef/--force-confold, as pyinfra's own apt operations), waiting
    for dpkg's locks. Pass package names and paths as QuoteString."""
    return StringCommand(noninteractive_apt(apt_lock_wait()), *args)


def apt_install(packages: list[str], *options: str) -> StringCommand:
    """apt-get install ``options`` ``packages`` (each quoted)."""
    return apt_get("install", *options, *(QuoteString(package) for package in packages))


def apt_update() -> StringCommand:
    """apt-get update, tried up to data/apt.toml's ``update_attempts`` times: it never waits
    for the lists lock, and mirrors fail it now and then."""
    settings = data.apt()
    attempts, delay = settings.update_attempts, settings.update_retry_delay_s
    return StringCommand(
        f"attempt=1; until apt-get update -q; do "
        f'if [ "$attempt" -ge {attempts} ]; then '
        f'echo "apt-get update failed {attempts} times" >&2; exit 100; fi; '
        f'echo "apt-get update failed (attempt $attempt of {attempts}); '
        f'retrying in {delay} s" >&2; '
        f"attempt=$((attempt + 1)); sleep {delay}; done"
    )


@operation(is_idempotent=False)
def apt_lists_updated():
    """Refresh apt's lists (retried; see apt_update)."""
    yield apt_update()


@operation()
def packages_installed(packages: list[str]):
    """Install those of ``packages`` the host lacks, without recommends, after refreshing
    apt's lists; a host that has them all is not touched."""
    installed = read_once(host, DebPackages)
    missing = [package for package in packages if package not in installed]
    if not missing:
        host.noop(f"{', '.join(packages)} installed")
        return
    yield apt_update()
    yield apt_install(missing, "--no-install-recommends")


def ensure_packages(name: str, packages: list[str]) -> None:
    """Install missing packages without recommends; refresh apt's lists only when installing,
    so a host that has everything is not touched."""
    packages_installed(name=name, packages=packages)


@operation()
def template_file(
    src: str,
    dest: str,
    user: str | None = None,
    group: str | None = None,
    mode: str | None = None,
    compared: tuple[str, ...] = (),
    **data,
):
    """pyinfra's files.template (its arguments), with one fact read for a file already there.

    files.template reads File, Sha1File and the parent's Directory even when nothing
    changed; here one FileStates read finds the rendered file with its owner and mode, and
    anything else is files.template's work.

    + compared: the role's other files, read in the same command
    """
    template_data = {"host": host, "state": state, "inventory": state.inventory, **data}
    try:
        rendered = get_template(src).render(template_data)
    except Exception:
        rendered = None  # files.template reports the template's error, with its line
    found = read_once(host, FileStates, paths=tuple(sorted({dest, *compared}))).get(dest)
    if (
        found
        and rendered is not None
        and found["sha1"] == hashlib.sha1(rendered.encode()).hexdigest()
        and (not mode or found["mode"] == ensure_mode_int(mode))
        and (not user or found["user"] == user)
        and (not group or found["group"] == group)
    ):
        host.noop(f"file {dest} is already uploaded")
        return
    yield from files.template._inner(src=src, dest=dest, user=user, group=group, mode=mode, **data)


# The unit suffixes systemd.service takes as they are; any other name gets ".service".
UNIT_SUFFIXES = (".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target")
UNIT_SUFFIXES += (".path", ".timer", ".slice", ".scope")


@operation()
def service_running(service: str):
    """pyinfra's systemd.service(running=True, enabled=True), with no read of its own for
    a unit running and enabled.

    systemd.service reads two facts of its unit; here the state of every loaded unit, read
    once for all the roles' units, finds it (a running unit is loaded). Anything else is
    systemd.service's work.

    + service: the unit (".service" added to a bare name, as systemd.service does)
    """
    unit = service if service.endswith(UNIT_SUFFIXES) else f"{service}.service"
    read_together(host, (SystemdStatus, {}), (SystemdEnabled, {}))
    if read_once(host, SystemdStatus).get(unit) and read_once(host, SystemdEnabled).get(unit):
        host.noop(f"service {unit} is running")
        return
    yield from systemd.service._inner(service=service, running=True, enabled=True)


def upload_into(host_, content: bytes, staging: str, what: str) -> None:
    """Write ``content`` into ``staging``, a file that exists already with its final mode:
    the SFTP server (or cp, under sudo) writes into it and keeps that mode, so a secret is
    never readable by others, not even while it is uploaded; under sudo the SSH user's own
    copy lies in a folder only it can enter (transfer_arguments). ``what`` names it in
    errors; the content is never shown."""
    with transfer_arguments(host_) as transfer:
        uploaded = host_.put_file(io.BytesIO(content), staging, **transfer(staging))
    if not uploaded:
        raise OperationError(f"could not upload {what}")


def put_private_file(host_, content: bytes, path: str, mode: str, what: str) -> None:
    """Install ``content`` at ``path`` (root's, ``mode``) from inside an operation: a staging
    file is created with that mode before any content is written (upload_into), then moved
    into place, so the content is never readable by others, not even half-written."""
    q = shlex.quote
    staging = path + ".pyinfra-sglang-new"
    ok, out = run_on_host(
        host_,
        # mkdir -p: a folder that exists (DKMS's own) keeps its mode.
        f"mkdir -p {q(path.rsplit('/', 1)[0])} && rm -f {q(staging)} && "
        f"install -m {q(mode)} /dev/null {q(staging)}",
    )
    if not ok:
        raise OperationError(f"could not prepare {what}: {out}")
    try:
        upload_into(host_, content, staging, what)
        ok, out = run_on_host(host_, f"mv -f {q(staging)} {q(path)}")
        if not ok:
            raise OperationError(f"could not install {what}: {out}")
    except Exception:
        run_on_host(host_, f"rm -f {q(staging)}")
        raise


def unit_exec_words(argv: Sequence[str]) -> str:
    """Shell words for a command systemd-run puts in a transient unit: each word quoted for the
    shell, each '$' doubled. systemd expands ``$NAME`` and ``${NAME}`` in a unit's command line,
    an unknown name to nothing; "$$" passes one '$' (systemd-run(1), docs/sources.md)."""
    return " ".join(shlex.quote(word.replace("$", "$$")) for word in argv)


def systemd_run(unit: str, options: Sequence[str], argv: Sequence[str], tries: int = 5) -> str:
    """Shell that runs ``systemd-run --quiet --unit=UNIT OPTIONS ARGV`` (each quoted here,
    ``argv`` by ``unit_exec_words``), failing as systemd-run does. systemd unloads a finished
    transient unit asynchronously; until then systemd-run refuses the name ("was already
    loaded or has a fragment file"): stop it, forget it, and try again, a second apart,
    ``tries`` times in all."""
    unit = shlex.quote(unit)
    options_text = "".join(f"{shlex.quote(option)} " for option in options)
    return (
        f"for try in {' '.join(str(n) for n in range(1, tries + 1))}; do "
        f"systemd-run --quiet --unit={unit} {options_text}{unit_exec_words(argv)} "
        f"&& break; [ $try = {int(tries)} ] && exit 1; "
        f"{{ systemctl stop {unit}; systemctl reset-failed {unit}; }} 2>/dev/null; sleep 1; "
        "done"
    )
