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
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.systemd import SystemdStatus

from checks.facts import FileDigests, NvidiaGpus
from pyinfra_sglang import data
from pyinfra_sglang.gpus import arch_from_compute_cap, find_gpu
from pyinfra_sglang.inventory import HostConfig, host_config, host_profile
from pyinfra_sglang.render import (
    RenderedFile,
    cache_dirs,
    render_router_unit,
    render_service_files,
)
from roles.common import connector_arguments
from roles.cuda_toolkit import cuda_paths
from roles.python_env import venv_packages

KEEP_SUFFIX = ".last-good"
ROUTER_UNIT_PATH = "/etc/systemd/system/sglang-router.service"
ROUTER_START_TIMEOUT_S = 120


def cache_folders() -> str:
    """The service's cache folders, space-separated for one `install -d`."""
    return " ".join(sorted(cache_dirs().values()))


UNIT_NAME = "sglang.service"


@dataclass(frozen=True)
class ServiceFiles:
    unit_name: str
    files: tuple[RenderedFile, ...]
    health_url: str | None  # None: this node serves no HTTP (a multi-node rank > 0)
    start_timeout_s: int
    router_health_url: str | None = None  # the router in front of replicas, when configured
    stale: tuple[str, ...] = ()  # files of units no longer configured (a removed router)


def read_secret(path: Path | None, what: str) -> str | None:
    """A secret from a file on the controller, stripped; never logged."""
    if path is None:
        return None
    try:
        secret = Path(path).expanduser().read_text().strip()
    except OSError as error:
        raise OperationError(f"host {host.name}: cannot read {what} file {path}: {error.strerror}")
    if not secret:
        raise OperationError(f"host {host.name}: {what} file {path} is empty")
    return secret


def multinode_position(config: HostConfig) -> tuple[int, int, str | None]:
    """(nnodes, node_rank, dist_init_addr) from the host's multi-node group, in its order."""
    if not config.sglang_multinode_group:
        return 1, 0, None
    members = [h.name for h in host.inventory.get_group(config.sglang_multinode_group)]
    first = host.inventory.get_host(members[0])
    head = first.data.get("ssh_hostname") or first.name
    return len(members), members.index(host.name), f"{head}:{config.sglang_dist_init_port}"


def gpu_topology_is_pcie_only(gpus: list[dict]) -> bool:
    """Several GPUs and none of them NVLinked, per the spec table (the audit measures it)."""
    specs = [find_gpu(gpu["name"] or "") for gpu in gpus]
    return len(gpus) > 1 and not any(spec and spec.nvlink for spec in specs)


def server_url(config: HostConfig, port: int | None = None) -> str:
    """How the host reaches its own server (or, with ``port``, its router): a wildcard bind
    on loopback, an IPv6 address in brackets."""
    address = "127.0.0.1" if config.sglang_host.is_unspecified else str(config.sglang_host)
    host_part = f"[{address}]" if ":" in address else address
    return f"http://{host_part}:{port or config.sglang_port}"


def service_file_path(kind: str) -> str:
    """Where the service's ``unit``, ``env``, ``config`` or ``router_unit`` file lives."""
    return data.load("sglang_service")["files"][kind]["path"]


def service_files(config: HostConfig, gpus: list[dict] | None = None) -> ServiceFiles:
    """Render the unit, env and config for this host from its facts (GpuFitError etc. when
    the profile cannot run here); ``gpus``: the NvidiaGpus fact when the caller has read it."""
    if gpus is None:
        gpus = host.get_fact(NvidiaGpus)
    if not gpus:
        raise OperationError(
            f"host {host.name}: nvidia-smi reports no GPUs; reboot into the installed driver "
            "(allow_reboot: true does it) before the SGLang service can be sized"
        )
    profile = host_profile(config)
    memory_gb = min(int((g["memory.total"] or "0").split()[0]) for g in gpus) / 1024
    nnodes, rank, dist_init_addr = multinode_position(config)
    files = render_service_files(
        profile,
        sglang_version=config.sglang_version,
        gpu_count=len(gpus),
        gpu_memory_gb=memory_gb,
        host=str(config.sglang_host),
        port=config.sglang_port,
        venv_path=config.venv_path,
        api_key=read_secret(config.sglang_api_key_file, "API key"),
        hf_token=read_secret(config.hf_token_file, "Hugging Face token"),
        pcie_only=gpu_topology_is_pcie_only(gpus),
        arch=arch_from_compute_cap(gpus[0]["compute_cap"] or ""),
        cuda_home=cuda_paths(config.cuda_version)["home"],
        nnodes=nnodes,
        node_rank=rank,
        dist_init_addr=dist_init_addr,
    )
    if config.sglang_router_worker_urls:
        files.append(RenderedFile(
            ROUTER_UNIT_PATH,
            render_router_unit(
                config.venv_path, [str(u).rstrip("/") for u in config.sglang_router_worker_urls],
                str(config.sglang_host), config.sglang_router_port,
            ),
            "644",
        ))  # fmt: skip
    routed = bool(config.sglang_router_worker_urls)
    return ServiceFiles(
        unit_name=UNIT_NAME,
        files=tuple(files),
        health_url=f"{server_url(config)}/health" if rank == 0 else None,
        start_timeout_s=profile.start_timeout_s,
        router_health_url=f"{server_url(config, config.sglang_router_port)}/health" if routed else None,
        stale=() if routed else (ROUTER_UNIT_PATH,),
    )


def _run(host_, command: str) -> tuple[bool, str]:
    ok, output = host_.run_shell_command(command, **connector_arguments(host_))
    return ok, "\n".join(line.line for line in output)


def _wait_healthy(host_, unit: str, health_url: str | None, timeout_s: float) -> str | None:
    """None once healthy; else why not (the unit failed, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, show = _run(host_, f"systemctl show -p ActiveState -p SubState {unit}")
        status = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
        # Restart=on-failure turns a crash into "activating (auto-restart)", never "failed".
        if status.get("ActiveState") in ("failed", "inactive") or status.get("SubState") == "auto-restart":
            return f"{unit} exited ({status.get('ActiveState')}/{status.get('SubState')})"
        if health_url is None:
            if status.get("ActiveState") == "active":
                return None
        else:
            _, code = _run(host_, f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {health_url} || true")
            if code.strip() == "200":
                return None
        time.sleep(2)
    return f"{health_url or unit} not healthy after {timeout_s:.0f} s"


def _install(host_, files: tuple[RenderedFile, ...]) -> None:
    # One round trip for every folder: the files' own, and the model downloads and JIT
    # caches the env file points at (persistent disk).
    directories = sorted({rendered.path.rsplit("/", 1)[0] for rendered in files})
    _run(host_, f"install -d -m 755 {' '.join(directories)} {cache_folders()}")
    for rendered in files:
        # put_file shows no content and no diff: the env and config files hold secrets.
        staging = f"{rendered.path}.new"
        if not host_.put_file(io.BytesIO(rendered.content.encode()), staging, **connector_arguments(host_)):
            raise OperationError(f"could not upload {rendered.path}")
        ok, out = _run(host_, f"chown root:root {staging} && chmod {rendered.mode} {staging} && mv -f {staging} {rendered.path}")
        if not ok:
            raise OperationError(f"could not install {rendered.path}: {out}")


def _apply_with_rollback(state, host, service: ServiceFiles, keep_previous: bool) -> None:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so.
    unit = service.unit_name
    paths = [f.path for f in service.files]
    for stale in service.stale:
        _run(host, f"if [ -f {stale} ]; then systemctl disable --now {Path(stale).name}; rm -f {stale}; fi")
    if keep_previous:
        _run(host, " && ".join(f"{{ [ ! -f {p} ] || cp -p {p} {p}{KEEP_SUFFIX}; }}" for p in paths))
    _install(host, service.files)
    units = [Path(f.path).name for f in service.files if f.path.endswith(".service")]
    _run(host, f"systemctl daemon-reload && systemctl enable {' '.join(units)} && systemctl restart {' '.join(units)}")
    problem = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    if problem is None and service.router_health_url:
        problem = _wait_healthy(
            host, Path(ROUTER_UNIT_PATH).name, service.router_health_url, ROUTER_START_TIMEOUT_S
        )
    if problem is None:
        _run(host, " ".join(f"rm -f {p}{KEEP_SUFFIX};" for p in paths))
        logger.info(f"{host.print_prefix}{unit} is healthy ({service.health_url or 'active'})")
        return
    _, journal = _run(host, f"journalctl -u {unit} -n 40 --no-pager -o cat || true")
    logger.error(f"{host.print_prefix}the new configuration did not come up: {problem}; {unit}'s journal ends:\n{journal}")
    if not keep_previous:
        raise OperationError(f"the new configuration did not come up ({problem}) and there was no previous version to keep")
    restore = " ".join(
        f"if [ -f {p}{KEEP_SUFFIX} ]; then mv -f {p}{KEEP_SUFFIX} {p}; else rm -f {p}; fi;" for p in paths
    )
    _run(host, f"{restore} systemctl daemon-reload && systemctl restart {' '.join(units)}")
    previous = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    state_note = "is healthy again" if previous is None else f"did not come back either: {previous}"
    raise OperationError(f"the new configuration did not come up ({problem}); rolled back: the previous version {state_note}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def sglang_service(config: HostConfig):
    """Render; noop when the host has exactly these files and the service runs; else apply
    with health check and rollback."""
    service = service_files(config)
    current = host.get_fact(FileDigests, paths=[f.path for f in service.files] + list(service.stale))
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
        service_files(config, gpus)
    sglang_service(
        name=f"Serve {config.sglang_model_profile} with SGLang {config.sglang_version}",
        config=config,
    )
