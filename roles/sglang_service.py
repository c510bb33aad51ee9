"""The SGLang service: a systemd unit, its EnvironmentFile and its config file rendered from
the host's model profile, tensor parallelism from the GPUs found, secrets in 0600 files, and a
restart that keeps the previous working version when the new one does not come up.

The server runs as its own system user (``sglang``, created here), never as root, in a
systemd sandbox (templates/sglang.service.j2): it runs model code fetched from the Hub. That
user owns the cache folders and the config file (SGLang reads ``--config`` itself); the env
file stays root's (systemd reads it before dropping privileges); their folder is
root:sglang 0750.

A change is applied by roles/service_apply.py: keep the running version's files, write the
new ones through 0600 staging files, restart, wait for ``GET /health`` = 200, and roll back
to the kept files when the new version does not come up. This module says what the service
is (its files, their owners, the units to restart); that one how a change is carried out.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.facts.server import Command
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from checks.facts import (
    FileDigests,
    HttpStatus,
    IommuState,
    NvidiaGpus,
    NvidiaP2P,
    NvidiaTopology,
    PcieAcs,
    Virtualenvs,
    Virtualization,
    read_once,
    read_together,
)
from checks.host_context import group_interface, host_position
from checks.peer_path import read_peer_path
from checks.run_summary import dry_run
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config, rolling_group
from pyinfra_sglang.serving.render import RenderedFile, router_env_path
from pyinfra_sglang.serving.service_files import (
    ROUTER_UNIT_PATH,
    ServiceFiles,
    cache_folders,
    rank0_stops_first,
    read_secrets,
    router_requirements,
    server_url,
    service_file_path,
    service_files,
)
from pyinfra_sglang.serving.watchdog import all_paths, watchdog_files
from roles.python_env import venv_packages
from roles.service_apply import ApplyPlan, apply_with_rollback, coordinator, plan_apply
from roles.sglang_watchdog import sglang_watchdog, sglang_watchdog_removed


def service_user() -> str:
    """The system user the server runs as (data/sglang_service.toml [service_user])."""
    return data.sglang_service().service_user.name


def useradd_command(user: str) -> str:
    """Create ``user`` as a system user and group: no home folder made (its home is the cache
    root, which the role makes), no login shell."""
    home = data.sglang_service().environment.cache.root
    return (
        "useradd --system --user-group --no-create-home "
        f"--home-dir {shlex.quote(home)} --shell /usr/sbin/nologin {shlex.quote(user)}"
    )


def file_owner(path: str) -> str:
    """owner:group of a service file on the host: the config file is the service user's (SGLang
    reads it as that user); the rest, the env file included, are root's."""
    if path == service_file_path("config"):
        user = service_user()
        return f"{user}:{user}"
    return "root:root"


def host_service_files(config: HostConfig, gpus: list[dict] | None = None) -> ServiceFiles:
    """The service files for the current host; ``gpus``: the NvidiaGpus fact when the caller
    has read it."""
    if gpus is None:
        gpus = read_once(host, NvidiaGpus)
    secrets = read_secrets(config, host.name)
    if len(gpus) > 1:
        # The GPUs' peer path in one command: nvidia-smi's topology and P2P status, ACS on
        # the bridges, the IOMMU (the facts read_peer_path reads).
        read_together(
            host,
            (NvidiaTopology, {}),
            (NvidiaP2P, {"mode": "r"}),
            (PcieAcs, {}),
            (IommuState, {}),
            (Virtualization, {}),
        )
    # The topology tells NVLink from PCIe and the widest PCIe path (NCCL_P2P_LEVEL).
    topology = read_once(host, NvidiaTopology) if len(gpus) > 1 else None
    # Whether NCCL may use P2P: NVML's status, ACS, the IOMMU (checks/peer_path.py).
    peer = read_peer_path(host, len(gpus))
    node = host_position(config, host)
    group = config.sglang_multinode_group
    members = tuple(m.name for m in host.inventory.get_group(group)) if group else ()
    interface = group_interface(config, host)
    service = service_files(config, host.name, gpus, node, secrets, topology, peer, interface)
    rank0 = host_config(host.inventory.get_host(members[0])) if members else None
    return replace(
        service,
        rolling_group=rolling_group(host),
        rolling_batch=config.sglang_rolling_batch,
        multinode_group=group,
        node_rank=node.rank,
        group_hosts=members,
        rank0_health_url=f"{server_url(rank0)}/health" if rank0 else None,
        rank0_first=bool(members) and rank0_stops_first(config.sglang_version),
    )


def setup_steps(files: tuple[RenderedFile, ...]) -> tuple[str, ...]:
    """What the apply runs before the staging files are made, in the same round trip: the
    service user; the secrets' folder root:USER 0750; the other folders; the cache folders
    (model downloads, JIT caches, on persistent disk) the user's own, contents included."""
    q = shlex.quote
    user = service_user()
    secret_dir = posixpath.dirname(service_file_path("env"))
    other_dirs = sorted({posixpath.dirname(f.path) for f in files} - {secret_dir})
    caches = " ".join(q(folder) for folder in cache_folders())
    return (
        f"{{ id -u {q(user)} >/dev/null 2>&1 || {useradd_command(user)}; }}",
        f"install -d -m 750 -o root -g {q(user)} {q(secret_dir)}",
        *([f"mkdir -p {' '.join(q(d) for d in other_dirs)}"] if other_dirs else []),
        f"install -d -m 750 -o {q(user)} -g {q(user)} {caches}",
        # Caches an earlier release filled as root: the user's now, with what they hold.
        f'for d in {caches}; do if [ -n "$(find "$d" ! -user {q(user)} -print -quit)" ]; '
        f'then chown -R {q(user)}:{q(user)} "$d"; fi; done',
    )


def service_plan(
    service: ServiceFiles, keep_previous: bool, restart: tuple[str, ...] = ()
) -> ApplyPlan:
    """The apply plan of ``service``'s files (roles/service_apply.py): their owners, the
    folders and user they need first."""
    return plan_apply(
        service,
        keep_previous=keep_previous,
        restart=restart,
        owners={f.path: file_owner(f.path) for f in service.files},
        setup=setup_steps(service.files),
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def getent_command(user: str) -> str:
    return f"getent passwd {shlex.quote(user)} || true"


def digested_paths(service: ServiceFiles) -> list[str]:
    """The paths whose sha256 tells whether the host has ``service``'s files: its files, and
    the stale ones an earlier layout left."""
    return [f.path for f in service.files] + list(service.stale)


@operation()
def sglang_user():
    """The system user the server runs as: created when missing (no home folder made, no
    login shell), else a no-op."""
    user = service_user()
    entry = read_once(host, Command, command=getent_command(user))
    if entry:
        host.noop(f"system user {user} exists")
        return
    yield useradd_command(user)


@operation()
def sglang_service(config: HostConfig):
    """Render; noop when the host has exactly these files and the service runs; else apply
    with health check and rollback."""
    service = host_service_files(config)
    current = read_once(host, FileDigests, paths=digested_paths(service))
    unchanged = all(current.get(f.path) == _digest(f.content) for f in service.files) and not any(
        current.get(path) for path in service.stale
    )
    units_active = read_once(host, SystemdStatus)
    running = units_active.get(service.unit_name, False)
    # Asked only when nothing else calls for an apply: unchanged files, a running unit.
    healthy = (
        unchanged
        and running
        and (service.health_url is None or host.get_fact(HttpStatus, url=service.health_url) == 200)
    )
    group = coordinator(state).group(service.multinode_group)
    if healthy:
        if group is not None:
            group.decide(host.name, applies=False)
        host.noop(f"{service.unit_name} runs the rendered configuration, healthy")
        return
    restart = units_to_restart(
        service,
        current,
        units_active,
        lambda: (
            service.health_url is None or host.get_fact(HttpStatus, url=service.health_url) == 200
        ),
    )
    plan = service_plan(service, keep_previous=running, restart=restart)
    if state.is_executing:
        logger.info(
            f"{host.print_prefix}{service.unit_name}: "
            + (
                "configuration changed"
                if not unchanged
                else ("running but not healthy" if running else "not running")
            )
            + f"; waiting up to {service.start_timeout_s} s for {service.health_url or 'active'}"
        )
    elif dry_run():
        for line in plan.describe():
            logger.info(f"{host.print_prefix}{service.unit_name} would: {line}")
    # The files' contents (secrets included) are left out of this command's string form
    # (RenderedFile.content has repr=False): pyinfra prints it with -vv and in its debug log.
    if group is not None:
        group.decide(host.name, applies=True)
    yield FunctionCommand(apply_with_rollback, (plan,), {})


def units_to_restart(
    service: ServiceFiles, current: dict, units_active: dict, server_healthy: Callable[[], bool]
) -> tuple[str, ...]:
    """The units an apply restarts: each whose files changed or that is not running, and the
    server when it is not healthy (asked only of a running server with unchanged files). A
    profile change leaves the router up, so the replicas behind it keep serving while they
    take turns."""
    by_unit: dict[str, list[RenderedFile]] = {}
    for rendered in service.files:
        router = rendered.path in (ROUTER_UNIT_PATH, router_env_path())
        by_unit.setdefault(Path(ROUTER_UNIT_PATH).name if router else service.unit_name, []).append(
            rendered
        )
    return tuple(
        unit
        for unit, files in by_unit.items()
        if not units_active.get(unit, False)
        or any(current.get(f.path) != _digest(f.content) for f in files)
        or (unit == service.unit_name and not server_healthy())
    )


def venvs_to_remove(present: list[str], current: str, keep: int) -> list[str]:
    """Of the virtualenvs ``present`` (newest first), those beyond the ``keep`` newest, the
    one the server now runs from (``current``) always kept."""
    kept = [current] + [path for path in present if path != current][: max(0, keep - 1)]
    return [path for path in present if path not in kept]


@operation()
def old_venvs_removed(root: str, current: str, keep: int):
    """After the server switched to ``current``: the venvs in ``root`` beyond the newest
    ``keep`` removed (a rollback needs the one before)."""
    present = [path.rstrip("/") for path in read_once(host, Virtualenvs, root=root)]
    remove = venvs_to_remove(present, current.rstrip("/"), keep)
    if not remove:
        host.noop(f"{root} holds {len(present)} virtualenv(s), at most {keep} kept")
        return
    yield "rm -rf " + " ".join(shlex.quote(path) for path in remove)


@deploy("SGLang service")
def sglang_service_role() -> None:
    """Serve the model profile with SGLang: render, apply, wait for health, roll back.

    Renders the unit, env and config files for the GPUs found, then restarts only what changed
    and waits for `/health`; a failed start puts the previous files back.

    + sglang_model_profile: the profile served
    + sglang_version: the SGLang release
    + sglang_multinode_group: the multi-node group, if any
    + sglang_router_worker_urls: run a router over these servers
    + sglang_rolling_batch: servers restarted at a time behind a router
    + sglang_watchdog: a timer that restarts a server whose decode check fails
    """
    config = host_config(host)
    if config.sglang_router_worker_urls:
        # The Model Gateway numbers its releases on its own: pinned per SGLang release in
        # data/python.toml [router] (sglang-router up to SGLang 0.5.8, then smg).
        router = router_requirements(config.sglang_version)
        venv_packages(
            name="Install SGLang's router "
            + ", ".join(f"{package} {version}" for package, version in router.items()),
            venv=config.venv_path,
            requirements=router,
            index_url=str(config.pypi_index_url),
        )
    gpus = read_once(host, NvidiaGpus)
    # The service as the host has it, in one command for the operations below: its files'
    # and the watchdog's sha256, its user, systemd's units, the venvs.
    venvs = data.python().venv
    root = venvs.root.rstrip("/")
    watchdog = watchdog_files(config) if config.sglang_watchdog else None
    service_facts = [
        (FileDigests, {"paths": [f.path for f in watchdog] if watchdog else all_paths()}),
        (Command, {"command": getent_command(service_user())}),
        (SystemdStatus, {}),
        (SystemdEnabled, {}),
        (Virtualenvs, {"root": root}),
    ]
    if gpus:
        # Refuse now, before any host changes, what cannot run here: a model that does not
        # fit, a GPU architecture the profile excludes, an unreadable secret file.
        service = host_service_files(config, gpus)
        service_facts.append((FileDigests, {"paths": digested_paths(service)}))
    read_together(host, *service_facts)
    sglang_user(name=f"Create the {service_user()} system user")
    sglang_service(
        name=f"Serve {config.sglang_model_profile} with SGLang {config.sglang_version}",
        config=config,
    )
    if watchdog:
        sglang_watchdog(
            name=f"Run the watchdog: a decode check every {config.sglang_watchdog_interval_s} s",
            files=watchdog,
        )
    else:
        sglang_watchdog_removed(name="No watchdog")
    if config.venv_path.startswith(root + "/"):
        old_venvs_removed(
            name="Remove virtualenvs of earlier releases",
            root=root,
            current=config.venv_path,
            keep=int(venvs.keep),
        )
