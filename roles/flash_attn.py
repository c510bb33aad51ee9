"""flash-attn built from source into the SGLang virtualenv, with a job count that fits the
host's memory and only the CUDA architectures its GPUs have. A re-apply with the same pin
is a no-op while the build's record covers the GPUs' architectures (or names exactly
``flash_attn_cuda_archs``); after a GPU upgrade to another architecture it builds again. The
build log and its record stay on the host.

The memory side of the plan is checked before anything changes on any host. The GPUs are
read when the build runs: on a fresh host the driver that lets nvidia-smi see them is
installed earlier in the same deploy.
"""

from __future__ import annotations

import json
import shlex
import time

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, deploy, operation
from pyinfra.api.exceptions import OperationError, PyinfraError
from pyinfra.facts.hardware import Cpus

from checks.facts import JsonRecord, MemoryInfo, PythonPackages, read_once
from checks.flash_attn_decision import flash_attn_decision, gpu_archs
from checks.host_context import run_on_host
from pyinfra_sglang import data
from pyinfra_sglang.data_models import FlashAttn
from pyinfra_sglang.driver.nvidia import cuda_paths
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.python_env.flash_attn_build_plan import (
    BuildPlan,
    BuildProgress,
    archs_text,
    build_log_paths,
    built_archs,
    duration_text,
    plan_flash_attn_build,
    rebuild_reason,
)
from pyinfra_sglang.terminal import shown
from roles import flash_attn_site
from roles.common import systemd_run
from roles.flash_attn_site import BuildSite, venv_python, wheel_folder, wheel_installed
from roles.python_env import index_options, venv_packages


def build_off(why: str) -> str:
    """The noop of a host that builds no flash-attn, with why (flash_attn_need.py)."""
    return f"flash-attn not built ({why}): nothing built or removed"


def host_build_plan(archs: list[str] | tuple[str, ...], memory_fraction: float) -> BuildPlan:
    """The plan for this host's cores and available memory (raises BuildPlanError when not
    even one job fits)."""
    available_gb = read_once(host, MemoryInfo)["available_kb"] / 1024**2
    return plan_flash_attn_build(read_once(host, Cpus), available_gb, archs, memory_fraction)


def host_cuda_archs(archs_override: list[str] | None) -> tuple[str, ...]:
    """The architectures to build for: the inventory's, else those of the GPUs found."""
    if archs_override:
        return tuple(archs_override)
    return gpu_archs()


def build_due(venv: str, version: str, archs_override: list[str] | None) -> tuple[bool, str]:
    """Must flash-attn ``version`` be built on this host, and why (or why not): another
    version (or none) in the venv, or a build whose record does not cover the GPUs'
    architectures (or is not exactly ``flash_attn_cuda_archs``)."""
    found = read_once(host, PythonPackages, venv=venv).get("flash-attn")
    if found != version:
        return True, f"the venv has {f'flash-attn {found}' if found else 'no flash-attn'}"
    built = built_archs(read_once(host, JsonRecord, path=build_log_paths(version)[1]))
    gpus = gpu_archs()
    reason = rebuild_reason(built, gpus, archs_override)
    if reason:
        return True, reason
    against = (
        "flash_attn_cuda_archs"
        if archs_override
        else f"the GPUs' {archs_text(gpus)}"
        if gpus
        else "no GPUs reported to check against"
    )
    return (
        False,
        f"flash-attn {version} is installed, built for {archs_text(built or ())} ({against})",
    )


@operation()
def flash_attn_built(
    venv: str,
    version: str,
    archs_override: list[str] | None,
    memory_fraction: float,
    cuda_home: str,
    index_url: str,
    build: bool = True,
    off_reason: str = "flash_attn_build = false in the inventory",
    site_key: tuple | None = None,
):
    """Build and install flash-attn ``version`` unless the venv has it, built for what is
    wanted (see build_due), or ``build`` is off (not needed, or the inventory's
    flash_attn_build: nothing is read or changed; ``off_reason`` says why). The log and a
    record of the build (seconds, CUDA architectures, variables, the kept wheel and its
    sha256) stay under /var/log/pyinfra-sglang; a failed build shows the log's tail. With
    ``site_key`` (flash_attn_build_once): the site's seed builds and hands its wheel on, the
    others install it (roles/flash_attn_site.py)."""
    if not build:
        host.noop(build_off(off_reason))
        return
    due, why = build_due(venv, version, archs_override)
    site = flash_attn_site.site_of(state, host, site_key) if site_key else None
    seeding = site if site is not None and site.seed == host.name and site.copying else None
    if site is not None and site.seed != host.name and due:
        indexes = index_options("pip", index_url)
        yield from indexes.uploads
        args = StringCommand(*indexes.args).get_raw_value() if indexes.args else ""
        copy = (site, version, venv, indexes.prefix, args)
        yield FunctionCommand(_installed_from_seed, copy, {})
        return
    if not due:
        if seeding is not None:
            yield FunctionCommand(_kept_wheel_relayed, (seeding, version), {})
            return
        host.noop(why)
        return
    archs = host_cuda_archs(archs_override)
    if not archs:
        if not state.is_executing:
            # Change detection before the driver is in: the GPUs are read when this runs.
            yield StringCommand(
                "true",
                QuoteString(f"build flash-attn {version} for the GPUs nvidia-smi will report"),
            )
            return
        default = ";".join(data.python().flash_attn.default_cuda_archs)
        raise OperationError(
            "nvidia-smi reports no GPUs, so the CUDA architectures to build flash-attn for "
            "are unknown: reboot into the installed driver (allow_reboot: true does it), or "
            'set flash_attn_cuda_archs (e.g. ["90"] for H100/H200, ["120"] for RTX PRO 6000). '
            f"Not left to flash-attn's own default ({default}): kernels for every one of "
            "them, the build's time and memory several times over"
        )
    plan = host_build_plan(archs, memory_fraction)
    log = build_log_paths(version)[0]
    if state.is_executing:
        logger.info(
            f"{host.print_prefix}flash-attn {version} build plan: {plan.describe()}; "
            f"log: {log}; building because {why}"
        )
    env = {**plan.env(), "CUDA_HOME": cuda_home}
    indexes = index_options("pip", index_url)
    yield from indexes.uploads
    yield build_start_command(version, env, list(plan.archs), venv, indexes)
    yield FunctionCommand(_wait_for_build, (version, seeding), {})


def _settings() -> FlashAttn:
    return data.python().flash_attn


def _status_path(version: str) -> str:
    return build_log_paths(version)[0].removesuffix(".log") + ".status"


def build_script(version: str, env: dict[str, str], archs: list[str], venv: str, indexes) -> str:
    """The shell the build unit runs (systemd expands ``${...}`` in a unit's command line,
    so it holds none): the index credentials read from their root-only files
    (never in an argument); pip builds the wheel into its log (-v streams the build's own
    output, so ninja's [N/M] steps show while it runs) and installs it; the wheel is kept
    (flash_attn_build_once hands it to the site's other hosts); the record, with the wheel's
    sha256, on success; the exit status last."""
    log, record = build_log_paths(version)
    folder = wheel_folder(version)
    staging = f"{folder}.new"
    q = shlex.quote
    exports = " ".join(f"{key}={q(value)}" for key, value in env.items())
    python = QuoteString(venv_python(venv))
    # No cache: the same version again (other GPUs) must not reuse the wheel built for the
    # old architectures (FLASH_ATTN_CUDA_ARCHS is not in any cache key).
    build = StringCommand(
        python,
        "-m pip wheel -v --disable-pip-version-check --no-deps --no-build-isolation",
        "--no-cache-dir --wheel-dir",
        QuoteString(staging),
        *indexes.args,
        QuoteString(f"flash-attn=={version}"),
    ).get_raw_value()
    index_args = StringCommand(*indexes.args).get_raw_value() if indexes.args else ""
    install = wheel_installed(StringCommand(python).get_raw_value(), index_args, '"$wheel"')
    # The record is JSON: the values go in as printf's arguments, quoted for the shell.
    record_format = (
        '{"version": %s, "seconds": %d, "log": %s, "archs": %s, "env": %s, '
        '"wheel": "%s", "sha256": "%s"}\\n'
    )
    prefix = f"{indexes.prefix} " if indexes.prefix else ""
    return (
        f"{prefix}start=$(date +%s); "
        f"if rm -rf {q(staging)} && mkdir -p {q(staging)} && "
        f"env {exports} PATH={q(env['CUDA_HOME'] + '/bin')}:$PATH {build} > {q(log)} 2>&1 && "
        f"wheel=$(ls {q(staging)}/flash_attn-*.whl) && {{ {install}; }} >> {q(log)} 2>&1 && "
        f"rm -rf {q(folder)} && mv {q(staging)} {q(folder)}; "
        f'then wheel={q(folder)}/"$(basename "$wheel")"; '
        f'sha=$(sha256sum "$wheel" | cut -d" " -f1); '
        f"printf {q(record_format)} {q(json.dumps(version))} "
        f'"$(( $(date +%s) - start ))" {q(json.dumps(log))} {q(json.dumps(archs))} '
        f'{q(json.dumps(env, sort_keys=True))} "$wheel" "$sha" > {q(record)}; rc=0; '
        f"else rc=$?; fi; echo $rc > {q(_status_path(version))}"
    )


def build_start_command(
    version: str, env: dict[str, str], archs: list[str], venv: str, indexes
) -> StringCommand:
    """Start the build in its transient unit, unless one is running already (an interrupted
    run's: this run waits for it)."""
    log = build_log_paths(version)[0]
    unit = shlex.quote(_settings().build_unit)
    script = build_script(version, env, archs, venv, indexes)
    return StringCommand(
        f"mkdir -p {shlex.quote(log.rsplit('/', 1)[0])} && "
        f"if ! systemctl is-active --quiet {unit}; then "
        f"rm -f {shlex.quote(_status_path(version))} && "
        f"{{ systemctl reset-failed {unit} 2>/dev/null; true; }} && "
        + systemd_run(_settings().build_unit, ["--setenv=HOME=/root"], ["/bin/sh", "-c", script])
        + "; fi"
    )


def _installed_from_seed(state, host, site: BuildSite, version, venv, prefix, args):
    """A copying host of the site: the seed's wheel, once on the controller, installed."""
    try:
        flash_attn_site.wheel_from_seed(state, host, site)
        flash_attn_site.installed_from_seed(host, site, version, venv, prefix, args)
    except OperationError as error:
        logger.error(f"{host.print_prefix}flash-attn {version}: {error}")
        return False
    finally:
        site.finish(host.name)
    return True


def _kept_wheel_relayed(state, host, site: BuildSite, version):
    """The site's seed with flash-attn built already: its kept wheel handed on."""
    site.started.set()
    try:
        flash_attn_site.relay(host, site, version)
    except OperationError as error:
        logger.error(f"{host.print_prefix}flash-attn {version}: {error}")
        return False
    return True


def _wait_for_build(state, host, version, site: BuildSite | None = None):
    # pyinfra passes (state, host) to a FunctionCommand function that names them so.
    # ``site``: this host seeds a site; its wheel goes on once built (or the site learns
    # why not).
    if site is None:
        return _build_waited(host, version)
    site.started.set()
    try:
        if not _build_waited(host, version):
            site.problem = "its build failed"
            return False
        flash_attn_site.relay(host, site, version)
    except OperationError as error:
        logger.error(f"{host.print_prefix}flash-attn {version}: {error}")
        return False
    finally:
        site.ready.set()
    return True


def _build_waited(host, version) -> bool:
    settings = _settings()
    q = shlex.quote
    log, status_path, unit = (
        build_log_paths(version)[0],
        _status_path(version),
        settings.build_unit,
    )
    progress = BuildProgress()
    started = time.monotonic()
    printed_at = started
    while True:
        time.sleep(float(settings.poll_every_s))
        active, _ = run_on_host(host, f"systemctl is-active --quiet {q(unit)}")
        if not active:
            break
        if time.monotonic() - printed_at >= float(settings.progress_every_s):
            # The log's end holds the latest [N/M]; a whole log of uv -v is megabytes.
            _, tail = run_on_host(host, f"tail -c 65536 {q(log)} 2>/dev/null || true")
            line = progress.line(time.monotonic() - started, tail)
            logger.info(f"{host.print_prefix}flash-attn {version}: {line}")
            printed_at = time.monotonic()
    _, status = run_on_host(host, f"cat {q(status_path)} 2>/dev/null || true")
    took = duration_text(time.monotonic() - started)
    if status.strip() == "0":
        logger.info(f"{host.print_prefix}flash-attn {version}: built in {took}")
        return True
    _, tail = run_on_host(host, f"tail -n {int(settings.tail_lines)} {q(log)} 2>/dev/null")
    why = f"exit status {status.strip()}" if status.strip() else "the build unit ended unfinished"
    logger.error(
        f"{host.print_prefix}flash-attn {version} build failed after {took} ({why}); "
        f"log: {log}; its last lines:\n{shown(tail)}"
    )
    return False


def _may_seed(name: str, key: tuple) -> bool:
    """Could this host seed its site (build for the others)? Planning goes host by host:
    a member of the site before it in the inventory, registered already, seeds instead."""
    return flash_attn_site.site_of(state, host, key).seed == name


class BuildOnceRefused(PyinfraError):
    """flash_attn_build_once cannot group this host (the message says why)."""


def _site_registered(config, due: bool) -> tuple | None:
    """This host's place in its build site (flash_attn_build_once), at planning: its key,
    or None where it neither builds nor keeps a wheel to hand on (nothing to share)."""
    archs = host_cuda_archs(config.flash_attn_cuda_archs)
    if not archs:
        raise BuildOnceRefused(
            f"host {host.name}: flash_attn_build_once groups hosts by the CUDA architectures "
            "they build for, and nvidia-smi reports no GPUs here yet: set "
            'flash_attn_cuda_archs (e.g. ["90"] for H100/H200). Nothing was changed.'
        )
    record = read_once(host, JsonRecord, path=build_log_paths(config.flash_attn_version)[1])
    if not due and not (record or {}).get("wheel"):
        return None
    key = flash_attn_site.site_key(config, archs)
    flash_attn_site.register(state, host, key, due)
    return key


@deploy("flash-attn")
def flash_attn() -> None:
    """Build flash-attn from source into the venv, sized to the host's memory.

    Builds only when the installed version or its CUDA architectures differ from what is asked
    for; `MAX_JOBS` and `NVCC_THREADS` are planned from the host's cores and available memory,
    and a host where not even one job fits is refused before any change.

    + flash_attn_build: unset builds it only where the profile needs it; false never
    + flash_attn_version: the release built
    + flash_attn_cuda_archs: the architectures (default: the GPUs')
    + flash_attn_memory_fraction: the share of memory the build may plan for
    + flash_attn_build_once: one host a site builds, the others install its wheel
    """
    config = host_config(host)
    settings = data.python().flash_attn
    # The one operation, with the build off too: it then says why it changes nothing.
    build = {
        "name": f"Build flash-attn {config.flash_attn_version}",
        "venv": config.venv_path,
        "version": config.flash_attn_version,
        "archs_override": config.flash_attn_cuda_archs,
        "memory_fraction": config.flash_attn_memory_fraction,
        "cuda_home": cuda_paths(config.cuda_version)["home"],
        "index_url": str(config.pypi_index_url),
    }
    need = flash_attn_decision(config)
    if not need.build:
        flash_attn_built(**build, build=False, off_reason=need.why)
        return
    due = build_due(config.venv_path, config.flash_attn_version, config.flash_attn_cuda_archs)[0]
    key = _site_registered(config, due) if config.flash_attn_build_once else None
    if due and (key is None or _may_seed(host.name, key)):
        # A build may run here: refuse now, before any host changes, if not even one job fits.
        host_build_plan(config.flash_attn_cuda_archs or ["any"], config.flash_attn_memory_fraction)
    build["site_key"] = key
    venv_packages(
        name="Install flash-attn's build requirements",
        venv=config.venv_path,
        requirements=dict.fromkeys(settings.build_requirements),
        index_url=str(config.pypi_index_url),
    )
    flash_attn_built(**build)
