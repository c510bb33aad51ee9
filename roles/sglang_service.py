"""The SGLang service: a systemd unit, its EnvironmentFile and its config file rendered from
the host's model profile, tensor parallelism from the GPUs found, secrets root-only, and a
restart that keeps the previous working version when the new one does not come up.

A change is applied as: keep the running version's files, write the new ones, daemon-reload,
restart, wait for ``GET /health`` = 200. If the server crashes or is not healthy in the
profile's start timeout: show the journal's tail, put the kept files back, restart them, and
fail the run for that host.
"""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.systemd import SystemdStatus

from checks.facts import FileDigests, NvidiaGpus
from checks.host_context import connector_arguments, host_position, run_on_host
from pyinfra_sglang.inventory import HostConfig, host_config
from pyinfra_sglang.render import RenderedFile
from pyinfra_sglang.service_files import (
    ROUTER_UNIT_PATH,
    ServiceFiles,
    cache_folders,
    read_secrets,
    service_files,
)
from roles.python_env import venv_packages

KEEP_SUFFIX = ".last-good"
ROUTER_START_TIMEOUT_S = 120


def host_service_files(config: HostConfig, gpus: list[dict] | None = None) -> ServiceFiles:
    """The service files for the current host; ``gpus``: the NvidiaGpus fact when the caller
    has read it."""
    if gpus is None:
        gpus = host.get_fact(NvidiaGpus)
    secrets = read_secrets(config, host.name)
    return service_files(config, host.name, gpus, host_position(config, host), secrets)


def _wait_healthy(host_, unit: str, health_url: str | None, timeout_s: float) -> str | None:
    """None once healthy; else why not (the unit failed, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, show = run_on_host(host_, f"systemctl show -p ActiveState -p SubState {unit}")
        status = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
        # Restart=on-failure turns a crash into "activating (auto-restart)", never "failed".
        if (
            status.get("ActiveState") in ("failed", "inactive")
            or status.get("SubState") == "auto-restart"
        ):
            return f"{unit} exited ({status.get('ActiveState')}/{status.get('SubState')})"
        if health_url is None:
            if status.get("ActiveState") == "active":
                return None
        else:
            _, code = run_on_host(
                host_, f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {health_url} || true"
            )
            if code.strip() == "200":
                return None
        time.sleep(2)
    return f"{health_url or unit} not healthy after {timeout_s:.0f} s"


def _install(host_, files: tuple[RenderedFile, ...]) -> None:
    # One round trip for every folder: the files' own, and the model downloads and JIT
    # caches the env file points at (persistent disk).
    directories = sorted({rendered.path.rsplit("/", 1)[0] for rendered in files})
    run_on_host(host_, f"install -d -m 755 {' '.join(directories + cache_folders())}")
    for rendered in files:
        # put_file shows no content and no diff: the env and config files hold secrets.
        staging = f"{rendered.path}.new"
        if not host_.put_file(
            io.BytesIO(rendered.content.encode()), staging, **connector_arguments(host_)
        ):
            raise OperationError(f"could not upload {rendered.path}")
        ok, out = run_on_host(
            host_,
            f"chown root:root {staging} && chmod {rendered.mode} {staging} "
            f"&& mv -f {staging} {rendered.path}",
        )
        if not ok:
            raise OperationError(f"could not install {rendered.path}: {out}")


def _apply_with_rollback(state, host, service: ServiceFiles, keep_previous: bool) -> None:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so.
    unit = service.unit_name
    paths = [f.path for f in service.files]
    for stale in service.stale:
        run_on_host(
            host,
            f"if [ -f {stale} ]; then "
            f"systemctl disable --now {Path(stale).name}; rm -f {stale}; fi",
        )
    if keep_previous:
        run_on_host(
            host, " && ".join(f"{{ [ ! -f {p} ] || cp -p {p} {p}{KEEP_SUFFIX}; }}" for p in paths)
        )
    _install(host, service.files)
    units = [Path(f.path).name for f in service.files if f.path.endswith(".service")]
    unit_list = " ".join(units)
    run_on_host(
        host,
        f"systemctl daemon-reload && systemctl enable {unit_list} && systemctl restart {unit_list}",
    )
    problem = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    if problem is None and service.router_health_url:
        problem = _wait_healthy(
            host, Path(ROUTER_UNIT_PATH).name, service.router_health_url, ROUTER_START_TIMEOUT_S
        )
    if problem is None:
        run_on_host(host, " ".join(f"rm -f {p}{KEEP_SUFFIX};" for p in paths))
        logger.info(f"{host.print_prefix}{unit} is healthy ({service.health_url or 'active'})")
        return
    _, journal = run_on_host(host, f"journalctl -u {unit} -n 40 --no-pager -o cat || true")
    logger.error(
        f"{host.print_prefix}the new configuration did not come up: {problem}; "
        f"{unit}'s journal ends:\n{journal}"
    )
    if not keep_previous:
        raise OperationError(
            f"the new configuration did not come up ({problem}) "
            "and there was no previous version to keep"
        )
    restore = " ".join(
        f"if [ -f {p}{KEEP_SUFFIX} ]; then mv -f {p}{KEEP_SUFFIX} {p}; else rm -f {p}; fi;"
        for p in paths
    )
    run_on_host(host, f"{restore} systemctl daemon-reload && systemctl restart {' '.join(units)}")
    previous = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    state_note = "is healthy again" if previous is None else f"did not come back either: {previous}"
    raise OperationError(
        f"the new configuration did not come up ({problem}); "
        f"rolled back: the previous version {state_note}"
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def sglang_service(config: HostConfig):
    """Render; noop when the host has exactly these files and the service runs; else apply
    with health check and rollback."""
    service = host_service_files(config)
    current = host.get_fact(
        FileDigests, paths=[f.path for f in service.files] + list(service.stale)
    )
    unchanged = all(current.get(f.path) == _digest(f.content) for f in service.files) and not any(
        current.get(path) for path in service.stale
    )
    running = host.get_fact(SystemdStatus).get(service.unit_name, False)
    if unchanged and running:
        host.noop(f"{service.unit_name} runs the rendered configuration")
        return
    if state.is_executing:
        logger.info(
            f"{host.print_prefix}{service.unit_name}: "
            + ("configuration changed" if not unchanged else "not running")
            + f"; waiting up to {service.start_timeout_s} s for {service.health_url or 'active'}"
        )
    yield FunctionCommand(_apply_with_rollback, (service,), {"keep_previous": running})


@deploy("SGLang service")
def sglang_service_role() -> None:
    config = host_config(host)
    if config.sglang_router_worker_urls:
        venv_packages(
            name="Install SGLang's router",
            venv=config.venv_path,
            # The Model Gateway's releases follow their own numbering: not pinned here.
            requirements={"sglang-router": None},
            index_url=str(config.pypi_index_url),
        )
    gpus = host.get_fact(NvidiaGpus)
    if gpus:
        # Refuse now, before any host changes, what cannot run here: a model that does not
        # fit, a GPU architecture the profile excludes, an unreadable secret file.
        host_service_files(config, gpus)
    sglang_service(
        name=f"Serve {config.sglang_model_profile} with SGLang {config.sglang_version}",
        config=config,
    )
