"""The SGLang service: a systemd unit, its EnvironmentFile and its config file rendered from
the host's model profile, tensor parallelism from the GPUs found, secrets in 0600 files, and a
restart that keeps the previous working version when the new one does not come up.

The server runs as its own system user (``sglang``, created here), never as root, in a
systemd sandbox (templates/sglang.service.j2): it runs model code fetched from the Hub. That
user owns the cache folders and the config file (SGLang reads ``--config`` itself); the env
file stays root's (systemd reads it before dropping privileges); their folder is
root:sglang 0750.

A change is applied as: keep the running version's files, write the new ones, daemon-reload,
restart, wait for ``GET /health`` = 200. If the server crashes or is not healthy in the
profile's start timeout: show the journal's tail with every secret masked, put the kept files
back, restart them, and fail the run for that host.

A file is written as: its staging file (``PATH.new``) created empty with its final owner and
mode, the content uploaded into it, then moved over ``PATH``. A secret is never in a file that
others may read, not even while it is uploaded or when a run is interrupted; a failed install
removes the staging files.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from weakref import WeakKeyDictionary

import gevent
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.exceptions import OperationError, PyinfraError
from pyinfra.facts.server import Command
from pyinfra.facts.systemd import SystemdStatus

from checks.facts import FileDigests, HttpStatus, NvidiaGpus, NvidiaTopology, Virtualenvs
from checks.host_context import host_position, run_on_host
from checks.peer_path import read_peer_path
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config, rolling_group
from pyinfra_sglang.redact import redact
from pyinfra_sglang.render import RenderedFile, router_env_path
from pyinfra_sglang.service_files import (
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
from roles.common import upload_into
from roles.python_env import venv_packages

KEEP_SUFFIX = ".last-good"
ABSENT_SUFFIX = ".absent"  # kept for a file that did not exist: a rollback removes it
STAGING_SUFFIX = ".new"
ROUTER_START_TIMEOUT_S = 120
JOURNAL_LINES = 40
# Connector arguments under which pyinfra uploads as the SSH user to a temporary file, then
# copies it into place as another user.


def service_user() -> str:
    """The system user the server runs as (data/sglang_service.toml [service_user])."""
    return data.load("sglang_service")["service_user"]["name"]


def useradd_command(user: str) -> str:
    """Create ``user`` as a system user and group: no home folder made (its home is the cache
    root, which the role makes), no login shell."""
    home = data.load("sglang_service")["environment"]["cache"]["root"]
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
        gpus = host.get_fact(NvidiaGpus)
    secrets = read_secrets(config, host.name)
    # The topology tells NVLink from PCIe and the widest PCIe path (NCCL_P2P_LEVEL).
    topology = host.get_fact(NvidiaTopology) if len(gpus) > 1 else None
    # Whether NCCL may use P2P: NVML's status, ACS, the IOMMU (checks/peer_path.py).
    peer = read_peer_path(host, len(gpus))
    node = host_position(config, host)
    service = service_files(config, host.name, gpus, node, secrets, topology, peer)
    group = config.sglang_multinode_group
    members = tuple(m.name for m in host.inventory.get_group(group)) if group else ()
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


def _known_secrets(host_) -> list[str]:
    """The secret values this host's files hold, read again from the controller's files (the
    FunctionCommand does not carry them: its string form may be printed)."""
    try:
        secrets = read_secrets(host_config(host_), host_.name)
    except PyinfraError:
        # The operation read them a moment ago; should that fail now, mask by form alone.
        return []
    return [value for f in fields(secrets) if isinstance(value := getattr(secrets, f.name), str)]


# systemd's own exit statuses (systemd.exec(5), "Process Exit Codes": 200 EXIT_CHDIR ..
# 243 EXIT_CREDENTIALS, e.g. 219/CGROUP) mean the server never ran: systemd failed to set the
# process up. Seen on container hosts as a passing cgroup hiccup right after a restart; the
# unit's Restart= tries again after RestartSec, so the wait gives it that many tries.
SYSTEMD_SETUP_STATUSES = range(200, 244)
SETUP_FAILURES_TOLERATED = 2


# No command of the apply may wait forever on a connection that died: each has this bound,
# and a poll that runs out counts as "no answer yet" until the wait's own deadline.
COMMAND_TIMEOUT_S = 60
# How long a multi-node member waits for the others to decide whether they apply (each reads
# its facts first).
DECIDE_TIMEOUT_S = 180


def _run(host_, command: str) -> tuple[bool, str]:
    return run_on_host(host_, command, _timeout=COMMAND_TIMEOUT_S)


def _poll(host_, command: str) -> tuple[bool, str]:
    try:
        return _run(host_, command)
    except (OSError, TimeoutError):
        return False, ""


def _unit_status(host_, unit: str) -> dict[str, str]:
    _, show = _poll(
        host_,
        "systemctl show -p ActiveState -p SubState -p ExecMainStatus -p NRestarts "
        + shlex.quote(unit),
    )
    return dict(line.split("=", 1) for line in show.splitlines() if "=" in line)


def _unit_failure(status: dict[str, str]) -> str | None:
    """Why the unit is down (None while it runs or starts): Restart=on-failure turns a
    crash into "activating (auto-restart)", never "failed"."""
    down = status.get("ActiveState") in ("failed", "inactive")
    if down or status.get("SubState") == "auto-restart":
        return f"{status.get('ActiveState')}/{status.get('SubState')}"
    return None


def _setup_failure(status: dict[str, str]) -> bool:
    """The unit waits to be restarted after systemd failed to set its process up."""
    exit_status = status.get("ExecMainStatus", "")
    return (
        status.get("SubState") == "auto-restart"
        and exit_status.isdigit()
        and int(exit_status) in SYSTEMD_SETUP_STATUSES
    )


def _wait_for_restart(host_, unit: str, restarts: str | None, deadline: float) -> None:
    """Until systemd has restarted the unit (NRestarts moved on) or the deadline passes."""
    while time.monotonic() < deadline and _unit_status(host_, unit).get("NRestarts") == restarts:
        time.sleep(1)


def _wait_healthy(host_, unit: str, health_url: str | None, timeout_s: float) -> str | None:
    """None once healthy; else why not (the unit failed, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    tolerated = SETUP_FAILURES_TOLERATED
    while time.monotonic() < deadline:
        status = _unit_status(host_, unit)
        failure = _unit_failure(status)
        if failure and tolerated and _setup_failure(status):
            tolerated -= 1
            logger.warning(
                f"{host_.print_prefix}{unit}: systemd could not set its process up (exit "
                f"status {status.get('ExecMainStatus')}); its Restart= tries again"
            )
            _wait_for_restart(host_, unit, status.get("NRestarts"), deadline)
            continue
        if failure:
            return f"{unit} exited ({failure})"
        if health_url is None:
            if status.get("ActiveState") == "active":
                return None
        else:
            _, code = _poll(
                host_,
                f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {shlex.quote(health_url)} || true",
            )
            if code.strip() == "200":
                return None
        time.sleep(2)
    return f"{health_url or unit} not healthy after {timeout_s:.0f} s"


def prepare_command(files: tuple[RenderedFile, ...]) -> str:
    """One round trip before any content is sent: the service user; the secrets' folder
    root:USER 0750; the other folders; the cache folders (model downloads, JIT caches, on
    persistent disk) the user's own, contents included; and each file's staging file, empty,
    with the file's final owner and mode."""
    q = shlex.quote
    user = service_user()
    secret_dir = posixpath.dirname(service_file_path("env"))
    other_dirs = sorted({posixpath.dirname(f.path) for f in files} - {secret_dir})
    caches = " ".join(q(folder) for folder in cache_folders())
    steps = [
        f"{{ id -u {q(user)} >/dev/null 2>&1 || {useradd_command(user)}; }}",
        f"install -d -m 750 -o root -g {q(user)} {q(secret_dir)}",
        *([f"mkdir -p {' '.join(q(d) for d in other_dirs)}"] if other_dirs else []),
        f"install -d -m 750 -o {q(user)} -g {q(user)} {caches}",
        # Caches an earlier release filled as root: the user's now, with what they hold.
        f'for d in {caches}; do if [ -n "$(find "$d" ! -user {q(user)} -print -quit)" ]; '
        f'then chown -R {q(user)}:{q(user)} "$d"; fi; done',
    ]
    for rendered in files:
        staging = q(rendered.path + STAGING_SUFFIX)
        owner, group = file_owner(rendered.path).split(":")
        steps.append(
            f"rm -f {staging} && install -m {rendered.mode} -o {owner} -g {group} "
            f"/dev/null {staging}"
        )
    return " && ".join(steps)


def _upload(host_, rendered: RenderedFile, staging: str) -> None:
    upload_into(host_, rendered.content.encode(), staging, rendered.path)


def _install(host_, files: tuple[RenderedFile, ...]) -> None:
    q = shlex.quote
    staged = [(rendered, rendered.path + STAGING_SUFFIX) for rendered in files]
    ok, out = run_on_host(host_, prepare_command(files))
    if not ok:
        run_on_host(host_, "rm -f " + " ".join(q(staging) for _, staging in staged))
        raise OperationError(f"could not prepare the service's files: {out}")
    try:
        for rendered, staging in staged:
            _upload(host_, rendered, staging)
        ok, out = run_on_host(
            host_,
            " && ".join(
                f"chown {file_owner(rendered.path)} {q(staging)} "
                f"&& chmod {rendered.mode} {q(staging)} && mv -f {q(staging)} {q(rendered.path)}"
                for rendered, staging in staged
            ),
        )
        if not ok:
            raise OperationError(f"could not install the service's files: {out}")
    except Exception:
        run_on_host(host_, "rm -f " + " ".join(q(staging) for _, staging in staged))
        raise


# Servers behind one router take turns (sglang_rolling_batch at a time): pyinfra runs an
# operation on every host at once, each in its own greenlet, so one semaphore per router and
# run is what turns "all at once" into a rolling change. Not a scheduler: pyinfra still runs
# the hosts; a turn only waits for a slot.


@dataclass
class _Rollout:
    """One router's rolling change in one run: the free turns, and who failed first."""

    slot: BoundedSemaphore
    failed: str | None = None


_ROLLOUTS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {router: _Rollout}


@contextmanager
def _rolling_turn(state, host_, service: ServiceFiles):
    """This host's turn in its router's rolling change (at once when behind no router). After
    a host of the group failed, the hosts still waiting keep their running version."""
    if service.rolling_group is None:
        yield
        return
    rollouts = _ROLLOUTS.setdefault(state, {})
    rollout = rollouts.setdefault(
        service.rolling_group, _Rollout(BoundedSemaphore(service.rolling_batch))
    )
    with rollout.slot:
        if rollout.failed:
            raise OperationError(
                f"not changed: the rolling change of the servers behind {service.rolling_group} "
                f"failed on {rollout.failed} first; this host keeps serving its running version"
            )
        logger.info(
            f"{host_.print_prefix}{service.unit_name}: its turn behind "
            f"{service.rolling_group} ({service.rolling_batch} at a time)"
        )
        try:
            yield
        except Exception:
            rollout.failed = host_.name
            raise


@dataclass
class _GroupApply:
    """One multi-node group's apply in one run: the members that apply, those that decided
    whether to (each registers as its operation decides: while pyinfra checks for changes,
    or, with -y, as the hosts run it side by side) and how each one's start ended."""

    members: set[str] = field(default_factory=set)
    decided: set[str] = field(default_factory=set)
    outcomes: dict[str, str | None] = field(default_factory=dict)
    done: Event = field(default_factory=Event)
    # Rank 0 first (SGLang >= 0.5.21): set once rank 0 has stopped, or once it cannot
    # (rank0_problem says why; the other members then keep running).
    rank0_stopped: Event = field(default_factory=Event)
    rank0_problem: str | None = None

    def post(self, name: str, problem: str | None) -> None:
        self.outcomes.setdefault(name, problem)
        if set(self.outcomes) >= self.members:
            self.done.set()

    def decide(self, name: str, applies: bool) -> None:
        if applies:
            self.members.add(name)
        self.decided.add(name)

    def wait_decided(self, names: set[str], timeout_s: float) -> None:
        """Until every one of ``names`` decided whether it applies (bounded: a member that
        failed before deciding is not waited for past ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while not names <= self.decided and time.monotonic() < deadline:
            gevent.sleep(0.1)

    def rank0_failed(self, problem: str) -> None:
        if not self.rank0_stopped.is_set():
            self.rank0_problem = problem
            self.rank0_stopped.set()


_GROUP_APPLIES: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {group: _GroupApply}


def _group_apply(state, service: ServiceFiles) -> _GroupApply | None:
    if service.multinode_group is None:
        return None
    return _GROUP_APPLIES.setdefault(state, {}).setdefault(service.multinode_group, _GroupApply())


def _group_outcome(state, host_, service: ServiceFiles, problem: str | None) -> str | None:
    """The group's verdict for this member: its own problem, else the first other member's
    (the group rolls back as one), else None once every member that applies came up."""
    group = _group_apply(state, service)
    if group is None or len(group.members) < 2:
        return problem
    group.post(host_.name, problem)
    if not group.done.wait(timeout=service.start_timeout_s):
        missing = ", ".join(sorted(group.members - set(group.outcomes)))
        return problem or (
            f"group {service.multinode_group}: {missing} did not finish its start within "
            f"{service.start_timeout_s} s; the group rolls back as one"
        )
    if problem:
        return problem
    failed = sorted((name, p) for name, p in group.outcomes.items() if p)
    if failed:
        name, other = failed[0]
        return (
            f"group {service.multinode_group} rolls back as one: {name} did not come up ({other})"
        )
    return None


def _apply_with_rollback(
    state, host, service: ServiceFiles, keep_previous: bool, restart: tuple[str, ...] = ()
) -> bool:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so. A
    # failure ends with its message and False (the operation failed): pyinfra prints any
    # exception a callback raises as "Unexpected error in Python callback", with a traceback.
    unit = service.unit_name
    group = _group_apply(state, service)
    if group is not None:
        # With -y pyinfra checks nothing ahead: the members decide as they run, side by side.
        running = {h.name for h in state.inventory.get_active_hosts()}
        group.wait_decided(running & set(service.group_hosts), DECIDE_TIMEOUT_S)
    try:
        with _rolling_turn(state, host, service):
            _apply(state, host, service, keep_previous, restart)
    except (OperationError, OSError, TimeoutError) as error:
        message = str(error) if isinstance(error, OperationError) else f"{unit}: {error!r}"
        group = _group_apply(state, service)
        if group is not None:
            group.post(host.name, message)  # the other members stop waiting for this one
            if service.node_rank == 0:
                group.rank0_failed(message)
        logger.error(f"{host.print_prefix}{message}")
        return False
    return True


def _restart_rank0_first(state, host_, service: ServiceFiles, unit_list: str):
    """Restart this member's units in the order its SGLang release needs (from 0.5.21): rank
    0 stops first, as its stop drains it and sends the shutdown broadcast the other ranks
    wait for (they ignore SIGTERM, so stopped before it they would wait for the kill
    timeout); the other ranks then stop at once, and every member starts. Members with
    nothing to change in this run restart with the group, driven by the lowest-ranked member
    that applies: a rank 0 left running would hold the group's old rendezvous, and the other
    ranks exit on its broadcast and stay down (they exit 0; Restart=on-failure). Returns rank
    0's host when this member drove it (its health is then this member's to wait for)."""
    q = shlex.quote
    unit = service.unit_name
    group = _group_apply(state, service)
    ranks = service.group_hosts
    applying = group.members | {host_.name}
    idle = [name for name in ranks if name not in applying]
    leader = min(applying, key=ranks.index)
    driven = {name: state.inventory.get_host(name) for name in idle} if host_.name == leader else {}
    for name, other in driven.items():
        if not other.connected:  # left out of this run (--limit): the group needs it anyway
            try:
                other.connect(
                    reason=f"its group {service.multinode_group} restarts", raise_exceptions=True
                )
            except PyinfraError as error:
                group.rank0_failed(f"cannot reach {name}: {error}")
                raise OperationError(
                    f"not restarted: group {service.multinode_group} restarts as one and "
                    f"{name} cannot be reached ({error})"
                ) from None
    rank0 = ranks[0]
    if service.node_rank == 0:
        _run(host_, f"systemctl stop {q(unit)}")
        group.rank0_stopped.set()
    elif rank0 in driven:
        logger.info(f"{host_.print_prefix}{unit}: stopping rank 0 ({rank0}) first, its group's")
        ok, out = run_on_host(driven[rank0], f"systemctl stop {q(unit)}")
        if not ok:
            group.rank0_failed(f"could not stop rank 0 ({rank0}): {out}")
        group.rank0_stopped.set()
    if not group.rank0_stopped.wait(timeout=service.start_timeout_s):
        raise OperationError(
            f"group {service.multinode_group}: rank 0 ({rank0}) did not stop within "
            f"{service.start_timeout_s} s; this node keeps running"
        )
    if group.rank0_problem and service.node_rank != 0:
        raise OperationError(
            f"not restarted: rank 0 of group {service.multinode_group} did not stop "
            f"({group.rank0_problem}); from SGLang 0.5.21 the other ranks stop only after it"
        )
    for name, other in driven.items():
        if name != rank0:
            run_on_host(other, f"systemctl stop {q(unit)}")  # it got the broadcast: at once
    _run(host_, f"systemctl restart {unit_list}")
    for other in driven.values():
        _run(other, f"systemctl reset-failed {q(unit)} 2>/dev/null; systemctl start {q(unit)}")
    return driven.get(rank0)


def _keep_command(path: str) -> str:
    """Keep ``path``'s running version for a rollback: a copy (``.last-good``), or a mark that
    it did not exist (``.absent``). What an interrupted run kept is the version that ran
    before it, so it is never overwritten."""
    q = shlex.quote
    kept, absent = q(path + KEEP_SUFFIX), q(path + ABSENT_SUFFIX)
    return (
        f"if [ -e {kept} ] || [ -e {absent} ]; then :; "
        f"elif [ -f {q(path)} ]; then cp -p {q(path)} {kept}; else : > {absent}; fi"
    )


def _restore_command(path: str) -> str:
    """Put ``path``'s kept version back; a unit that did not exist before is disabled (and
    stopped) before its file goes."""
    q = shlex.quote
    kept, absent = q(path + KEEP_SUFFIX), q(path + ABSENT_SUFFIX)
    drop_unit = (
        f"systemctl disable --now {q(Path(path).name)} 2>/dev/null; "
        if path.endswith(".service")
        else ""
    )
    return (
        f"if [ -f {kept} ]; then mv -f {kept} {q(path)}; "
        f"elif [ -e {absent} ]; then {drop_unit}rm -f {q(path)} {absent}; fi;"
    )


def _forget_kept_command(paths: list[str]) -> str:
    q = shlex.quote
    return "rm -f " + " ".join(f"{q(p + KEEP_SUFFIX)} {q(p + ABSENT_SUFFIX)}" for p in paths)


def _apply(
    state, host, service: ServiceFiles, keep_previous: bool, restart: tuple[str, ...]
) -> None:
    """Install the files, restart the units in ``restart`` (those whose files changed, or
    that are down; all when empty) and wait for health; on failure put the kept files back,
    stale units included. OperationError says how it ended."""
    q = shlex.quote
    unit = service.unit_name
    paths = [f.path for f in service.files]
    kept_paths = paths + list(service.stale)
    if keep_previous:
        _run(host, " && ".join(_keep_command(p) for p in kept_paths))
    for stale in service.stale:
        _run(
            host,
            f"if [ -f {q(stale)} ]; then "
            f"systemctl disable --now {q(Path(stale).name)}; rm -f {q(stale)}; fi",
        )
    _install(host, service.files)
    units = [Path(f.path).name for f in service.files if f.path.endswith(".service")]
    restarted = list(restart or units)
    unit_list = " ".join(q(name) for name in restarted)
    # reset-failed: a unit its start limit stopped (a crash loop) would refuse the start.
    enable = (
        f"systemctl daemon-reload && systemctl enable {' '.join(q(name) for name in units)} && "
        f"systemctl reset-failed {unit_list} 2>/dev/null;"
    )
    rank0_host = None
    if service.rank0_first and unit in restarted:
        _run(host, f"{enable} true")
        rank0_host = _restart_rank0_first(state, host, service, unit_list)
    else:
        _run(host, f"{enable} systemctl restart {unit_list}")
    problem = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    if problem is None and rank0_host is not None:
        # Rank 0 had nothing to change, but restarted with the group: it answers for it.
        problem = _wait_healthy(rank0_host, unit, service.rank0_health_url, service.start_timeout_s)
    if problem is None and service.router_health_url:
        problem = _wait_healthy(
            host, Path(ROUTER_UNIT_PATH).name, service.router_health_url, ROUTER_START_TIMEOUT_S
        )
    problem = _group_outcome(state, host, service, problem)
    if problem is None:
        _run(host, _forget_kept_command(kept_paths))
        logger.info(f"{host.print_prefix}{unit} is healthy ({service.health_url or 'active'})")
        return
    _, journal = _run(host, f"journalctl -u {q(unit)} -n {JOURNAL_LINES} --no-pager -o cat || true")
    # SGLang logs its arguments at start, API keys included (sgl-project/sglang#37457), and
    # this tail goes to the controller's output and CI logs: masked.
    logger.error(
        f"{host.print_prefix}the new configuration did not come up: {problem}; "
        f"{unit}'s journal ends:\n{redact(journal, _known_secrets(host))}"
    )
    if not keep_previous:
        # Nothing to go back to: stopped and disabled, not left to crash-loop (or to reach
        # the Hub) in the background until a later run reports it as running.
        _run(host, f"systemctl disable --now {unit_list}")
        raise OperationError(
            f"the new configuration did not come up ({problem}) "
            f"and there was no previous version to keep: {unit_list} stopped and disabled"
        )
    restore = " ".join(_restore_command(p) for p in kept_paths)
    # Every unit whose file is back: those restarted for this run, and a stale one removed.
    again = " ".join(
        f"if [ -f {q(p)} ]; then systemctl enable {q(Path(p).name)} && "
        f"systemctl restart {q(Path(p).name)}; fi;"
        for p in kept_paths
        if p.endswith(".service") and (Path(p).name in restarted or p in service.stale)
    )
    _run(host, f"{restore} systemctl daemon-reload; {again} true")
    previous = _wait_healthy(host, unit, service.health_url, service.start_timeout_s)
    state_note = "is healthy again" if previous is None else f"did not come back either: {previous}"
    raise OperationError(
        f"the new configuration did not come up ({problem}); "
        f"rolled back: the previous version {state_note}"
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def sglang_user():
    """The system user the server runs as: created when missing (no home folder made, no
    login shell), else a no-op."""
    user = service_user()
    entry = host.get_fact(Command, command=f"getent passwd {shlex.quote(user)} || true")
    if entry:
        host.noop(f"system user {user} exists")
        return
    yield useradd_command(user)


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
    units_active = host.get_fact(SystemdStatus)
    running = units_active.get(service.unit_name, False)
    # Asked only when nothing else calls for an apply: unchanged files, a running unit.
    healthy = (
        unchanged
        and running
        and (service.health_url is None or host.get_fact(HttpStatus, url=service.health_url) == 200)
    )
    group = _group_apply(state, service)
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
    # The files' contents (secrets included) are left out of this command's string form
    # (RenderedFile.content has repr=False): pyinfra prints it with -vv and in its debug log.
    if group is not None:
        group.decide(host.name, applies=True)
    yield FunctionCommand(
        _apply_with_rollback, (service,), {"keep_previous": running, "restart": restart}
    )


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
    present = [path.rstrip("/") for path in host.get_fact(Virtualenvs, root=root)]
    remove = venvs_to_remove(present, current.rstrip("/"), keep)
    if not remove:
        host.noop(f"{root} holds {len(present)} virtualenv(s), at most {keep} kept")
        return
    yield "rm -rf " + " ".join(shlex.quote(path) for path in remove)


@deploy("SGLang service")
def sglang_service_role() -> None:
    """Renders the unit, EnvironmentFile and config file (below) from the host's model
    profile and inventory overrides, with `--tp-size` from the GPUs nvidia-smi reports (or
    the profile's `tp_size`), a fit check against the profile's GPU memory, NCCL hints when
    several GPUs have no NVLink, and multi-node flags from `sglang_multinode_group`. The
    server runs as the `sglang` system user (created by the role) with systemd sandboxing
    (NoNewPrivileges, ProtectSystem=strict with the cache folders writable, PrivateTmp,
    ProtectHome, kernel and cgroup protection, RestrictSUIDSGID). The API key goes into the
    config file (`--config`; `sglang:sglang` 0600, read by the server), never onto the
    command line; the HF token into the env file (`root:root` 0600, read by systemd);
    `/etc/sglang` is `root:sglang` 0750; files are staged 0600 before any content is
    written. A no-op when the host has exactly these files (compared by sha256), the service
    runs and its `/health` answers 200 (an active but unhealthy unit is restarted under the
    health wait). Otherwise: keep the running version's files, install the new ones,
    daemon-reload, restart, wait for `GET /health` = 200 for the profile's `start_timeout_s`
    (a start that systemd itself could not set up, its exit statuses 200-243 such as
    219/CGROUP, is left to the unit's `Restart=` up to twice; a crash of the server fails at
    once); on a crash or timeout print the journal's tail (redacted: real SGLang logs its
    API key at start), put the kept files back, restart them, and fail the run for that
    host; a first start with no previous version to go back to is stopped and disabled
    instead of left to crash-loop. On hosts with `sglang_router_worker_urls`, SGLang's
    router (pinned per SGLang release, `data/python.toml` `[router]`) is installed into the
    venv and its unit (sglang-router up to SGLang 0.5.8: `python -m
    sglang_router.launch_router ARGS`; smg, the gateway's continuation, from 0.5.9: `smg
    launch ARGS`; both with `--worker-urls ... --policy cache_aware
    --shutdown-grace-period-secs 180`, and `TimeoutStopSec` that grace plus 30 s) runs on
    `sglang_router_host` (loopback by default) and `sglang_router_port`, its metrics on
    loopback; a public bind needs `sglang_router_api_key_file`, whose key reaches it through
    a 0600 env file; its `/health` is waited for too, and the unit is removed when the
    worker URLs are. Only the units whose files changed (or that are down, or unhealthy)
    restart; servers behind one router take turns (below); a multi-node group comes up or
    rolls back as one. Afterwards the venvs beyond the newest two are removed (never the one
    the server runs from)."""
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
    gpus = host.get_fact(NvidiaGpus)
    if gpus:
        # Refuse now, before any host changes, what cannot run here: a model that does not
        # fit, a GPU architecture the profile excludes, an unreadable secret file.
        host_service_files(config, gpus)
    sglang_user(name=f"Create the {service_user()} system user")
    sglang_service(
        name=f"Serve {config.sglang_model_profile} with SGLang {config.sglang_version}",
        config=config,
    )
    venvs = data.load("python")["venv"]
    root = venvs["root"].rstrip("/")
    if config.venv_path.startswith(root + "/"):
        old_venvs_removed(
            name="Remove virtualenvs of earlier releases",
            root=root,
            current=config.venv_path,
            keep=int(venvs["keep"]),
        )
