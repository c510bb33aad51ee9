"""The apply engine of a service change on a host, with a way back.

An ``ApplyPlan`` says what one host's change is: the files to write (each with its owner),
the stale units to remove, the units to restart, whether the running version is kept for a
rollback, the health checks that decide whether the change came up, and the keys of the
rolling change (servers behind one router take turns) and of the multi-node group (its
members come up or roll back as one). ``plan_apply`` builds it, pure, from what the operation
read; ``describe()`` says it in words (``--dry``).

``apply_with_rollback`` carries a plan out on a host (a pyinfra FunctionCommand): keep the
running version's files (``PATH.last-good``, or ``PATH.absent`` for a file that did not
exist), write the new ones, daemon-reload, restart, wait for health. If the server crashes
or is not healthy in time: show the journal's tail with every secret masked, put the kept
files back, restart them, and fail the run for that host.

A file is written as: its staging file (``PATH.new``) created empty with its final owner and
mode, the content uploaded into it, then moved over ``PATH``. A secret is never in a file that
others may read, not even while it is uploaded or when a run is interrupted; a failed install
removes the staging files.

The hosts of one pyinfra run apply side by side, each in its own greenlet: the rolling turns
and the multi-node group's barrier live in one ``RunCoordinator`` per pyinfra State.
"""

from __future__ import annotations

import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from weakref import WeakKeyDictionary

import gevent
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from pyinfra import logger
from pyinfra.api.exceptions import OperationError, PyinfraError

from checks.host_context import run_on_host
from checks.run_summary import real
from pyinfra_sglang.host_programs.watchdog import SETUP_FAILURES_TOLERATED
from pyinfra_sglang.host_programs.watchdog import setup_failure as _setup_failure
from pyinfra_sglang.host_programs.watchdog import unit_failure as _unit_failure
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.redact import redact
from pyinfra_sglang.serving.render import RenderedFile
from pyinfra_sglang.serving.service_files import ROUTER_UNIT_PATH, ServiceFiles, read_secrets
from roles.common import upload_into
from roles.waiting import wait_until

KEEP_SUFFIX = ".last-good"
ABSENT_SUFFIX = ".absent"  # kept for a file that did not exist: a rollback removes it
STAGING_SUFFIX = ".new"
ROUTER_START_TIMEOUT_S = 120
JOURNAL_LINES = 40
# No command of the apply may wait forever on a connection that died: each has this bound,
# and a poll that runs out counts as "no answer yet" until the wait's own deadline.
COMMAND_TIMEOUT_S = 60
# How long a multi-node member waits for the others to decide whether they apply (each reads
# its facts first).
DECIDE_TIMEOUT_S = 180
HEALTH_POLL_S = 2
RESTART_POLL_S = 1

# systemd's own exit statuses (200-243, e.g. 219/CGROUP) mean the server never ran: seen on
# container hosts as a passing cgroup hiccup right after a restart; the unit's Restart= tries
# again. These rules live with the watchdog's host program, which restarts the server on the
# host by them too (one definition: pyinfra_sglang/host_programs/watchdog.py).


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedFile:
    """A file to write: its rendered form (content left out of every repr) and owner:group."""

    rendered: RenderedFile
    owner: str


@dataclass(frozen=True)
class HealthCheck:
    """A unit that must come up: its health URL answers 200 (None: systemd says active)."""

    unit: str
    url: str | None
    timeout_s: float


@dataclass(frozen=True)
class ApplyPlan:
    """One host's service change. Its string form is printed by pyinfra (-vv, debug log): it
    holds paths and unit names, never a file's content."""

    unit: str  # the server's unit: its journal is shown when the change does not come up
    files: tuple[PlannedFile, ...]
    # Shell run before the staging files are made (the service user, folders, caches).
    setup: tuple[str, ...]
    stale: tuple[str, ...]  # files of units no longer configured: disabled, removed
    units: tuple[str, ...]  # the units the files define: enabled
    restart: tuple[str, ...]  # of those, the ones this change restarts
    keep_previous: bool  # a running version to go back to
    health: tuple[HealthCheck, ...]  # in order; the first is the server's
    rolling_key: str | None = None
    rolling_batch: int = 1
    group_key: str | None = None
    node_rank: int = 0
    group_hosts: tuple[str, ...] = ()
    rank0_health_url: str | None = None
    rank0_first: bool = False

    @property
    def paths(self) -> list[str]:
        return [f.rendered.path for f in self.files]

    @property
    def kept_paths(self) -> list[str]:
        """What a rollback puts back: the files written and the stale ones removed."""
        return self.paths + list(self.stale)

    @property
    def server_health(self) -> HealthCheck:
        return self.health[0]

    @property
    def restarts_rank0_first(self) -> bool:
        return self.rank0_first and self.unit in self.restart

    def describe(self) -> list[str]:
        """The change in words, one line each (``--dry``)."""
        lines = [f"write {path}" for path in self.paths]
        lines += [f"remove {path} (its unit is no longer configured)" for path in self.stale]
        lines.append(
            f"restart {', '.join(self.restart)}"
            + (
                f" (rank 0 of group {self.group_key} stopped first)"
                if self.restarts_rank0_first
                else ""
            )
        )
        for check in self.health:
            lines.append(
                f"wait up to {check.timeout_s:.0f} s for {check.url or check.unit + ' active'}"
            )
        if self.rolling_key:
            lines.append(f"take turns behind {self.rolling_key}, {self.rolling_batch} at a time")
        if self.group_key:
            lines.append(f"come up or roll back with multi-node group {self.group_key}")
        lines.append(
            "on failure: put the running version back and restart it"
            if self.keep_previous
            else "on failure: stop and disable the units (no running version to go back to)"
        )
        return lines


def plan_apply(
    service: ServiceFiles,
    *,
    keep_previous: bool,
    restart: tuple[str, ...],
    owners: dict[str, str],
    setup: tuple[str, ...] = (),
) -> ApplyPlan:
    """The plan for ``service``'s files: ``restart`` the units that need it (all the files'
    units when empty); ``owners``: owner:group per path; ``setup``: shell run first."""
    units = tuple(Path(f.path).name for f in service.files if f.path.endswith(".service"))
    health = [HealthCheck(service.unit_name, service.health_url, service.start_timeout_s)]
    if service.router_health_url:
        health.append(
            HealthCheck(
                Path(ROUTER_UNIT_PATH).name, service.router_health_url, ROUTER_START_TIMEOUT_S
            )
        )
    return ApplyPlan(
        unit=service.unit_name,
        files=tuple(PlannedFile(f, owners[f.path]) for f in service.files),
        setup=setup,
        stale=tuple(service.stale),
        units=units,
        restart=tuple(restart) or units,
        keep_previous=keep_previous,
        health=tuple(health),
        rolling_key=service.rolling_group,
        rolling_batch=service.rolling_batch,
        group_key=service.multinode_group,
        node_rank=service.node_rank,
        group_hosts=service.group_hosts,
        rank0_health_url=service.rank0_health_url,
        rank0_first=service.rank0_first,
    )


# --- the run's coordinator --------------------------------------------------------------
# Servers behind one router take turns (sglang_rolling_batch at a time): pyinfra runs an
# operation on every host at once, each in its own greenlet, so one semaphore per router and
# run is what turns "all at once" into a rolling change. Not a scheduler: pyinfra still runs
# the hosts; a turn only waits for a slot.


@dataclass
class Rollout:
    """One router's rolling change in one run: the free turns, and who failed first."""

    slot: BoundedSemaphore
    failed: str | None = None


@dataclass
class GroupApply:
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


class RunCoordinator:
    """What the hosts of one pyinfra run share while they apply: each router's rolling turns
    and each multi-node group's barrier."""

    def __init__(self) -> None:
        self.rollouts: dict[str, Rollout] = {}
        self.groups: dict[str, GroupApply] = {}

    def group(self, key: str | None) -> GroupApply | None:
        if key is None:
            return None
        return self.groups.setdefault(key, GroupApply())

    @contextmanager
    def rolling_turn(self, host_, plan: ApplyPlan):
        """This host's turn in its router's rolling change (at once when behind no router).
        After a host of the group failed, the hosts still waiting keep their running
        version."""
        if plan.rolling_key is None:
            yield
            return
        rollout = self.rollouts.setdefault(
            plan.rolling_key, Rollout(BoundedSemaphore(plan.rolling_batch))
        )
        with rollout.slot:
            if rollout.failed:
                raise OperationError(
                    f"not changed: the rolling change of the servers behind {plan.rolling_key} "
                    f"failed on {rollout.failed} first; this host keeps serving its running "
                    "version"
                )
            logger.info(
                f"{host_.print_prefix}{plan.unit}: its turn behind "
                f"{plan.rolling_key} ({plan.rolling_batch} at a time)"
            )
            try:
                yield
            except Exception:
                rollout.failed = host_.name
                raise

    def group_outcome(self, host_, plan: ApplyPlan, problem: str | None) -> str | None:
        """The group's verdict for this member: its own problem, else the first other
        member's (the group rolls back as one), else None once every member that applies
        came up."""
        group = self.group(plan.group_key)
        if group is None or len(group.members) < 2:
            return problem
        group.post(host_.name, problem)
        if not group.done.wait(timeout=plan.server_health.timeout_s):
            missing = ", ".join(sorted(group.members - set(group.outcomes)))
            return problem or (
                f"group {plan.group_key}: {missing} did not finish its start within "
                f"{plan.server_health.timeout_s} s; the group rolls back as one"
            )
        if problem:
            return problem
        failed = sorted((name, p) for name, p in group.outcomes.items() if p)
        if failed:
            name, other = failed[0]
            return f"group {plan.group_key} rolls back as one: {name} did not come up ({other})"
        return None


_COORDINATORS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> RunCoordinator


def coordinator(state) -> RunCoordinator:
    """The run's coordinator: one per pyinfra State, gone with it. Keyed by the State itself,
    not pyinfra's context proxy (an operation's ``state``), whose hash moves with the
    context."""
    return _COORDINATORS.setdefault(real(state), RunCoordinator())


# --- commands on the host ---------------------------------------------------------------


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


def _wait_for_restart(host_, unit: str, restarts: str | None, deadline: float) -> None:
    """Until systemd has restarted the unit (NRestarts moved on) or the deadline passes."""
    wait_until(
        lambda: _unit_status(host_, unit).get("NRestarts") != restarts,
        deadline - time.monotonic(),
        RESTART_POLL_S,
    )


def wait_healthy(host_, unit: str, health_url: str | None, timeout_s: float) -> str | None:
    """None once healthy; else why not (the unit failed, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    tolerated = SETUP_FAILURES_TOLERATED

    def verdict() -> tuple[str | None] | None:
        # (None,): healthy; (why,): failed; None: ask again.
        nonlocal tolerated
        status = _unit_status(host_, unit)
        failure = _unit_failure(status)
        if failure and tolerated and _setup_failure(status):
            tolerated -= 1
            logger.warning(
                f"{host_.print_prefix}{unit}: systemd could not set its process up (exit "
                f"status {status.get('ExecMainStatus')}); its Restart= tries again"
            )
            _wait_for_restart(host_, unit, status.get("NRestarts"), deadline)
            return None
        if failure:
            return (f"{unit} exited ({failure})",)
        if health_url is None:
            return (None,) if status.get("ActiveState") == "active" else None
        _, code = _poll(
            host_,
            f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {shlex.quote(health_url)} || true",
        )
        return (None,) if code.strip() == "200" else None

    answer = wait_until(verdict, timeout_s, HEALTH_POLL_S)
    if answer is None:
        return f"{health_url or unit} not healthy after {timeout_s:.0f} s"
    return answer[0]


def _known_secrets(host_) -> list[str]:
    """The secret values this host's files hold, read again from the controller's files (the
    plan does not carry them: its string form may be printed)."""
    try:
        secrets = read_secrets(host_config(host_), host_.name)
    except PyinfraError:
        # The operation read them a moment ago; should that fail now, mask by form alone.
        return []
    return [value for f in fields(secrets) if isinstance(value := getattr(secrets, f.name), str)]


def prepare_command(plan: ApplyPlan) -> str:
    """One round trip before any content is sent: the plan's setup, then each file's staging
    file, empty, with the file's final owner and mode."""
    q = shlex.quote
    steps = list(plan.setup)
    for planned in plan.files:
        staging = q(planned.rendered.path + STAGING_SUFFIX)
        owner, group = planned.owner.split(":")
        steps.append(
            f"rm -f {staging} && install -m {planned.rendered.mode} -o {owner} -g {group} "
            f"/dev/null {staging}"
        )
    return " && ".join(steps)


def install_files(host_, plan: ApplyPlan) -> None:
    """Write the plan's files through their staging files; on any failure the staging files
    go and the old files stay."""
    q = shlex.quote
    staged = [(planned, planned.rendered.path + STAGING_SUFFIX) for planned in plan.files]
    ok, out = run_on_host(host_, prepare_command(plan))
    if not ok:
        run_on_host(host_, "rm -f " + " ".join(q(staging) for _, staging in staged))
        raise OperationError(f"could not prepare the service's files: {out}")
    try:
        for planned, staging in staged:
            rendered = planned.rendered
            upload_into(host_, rendered.content.encode(), staging, rendered.path)
        ok, out = run_on_host(
            host_,
            " && ".join(
                f"chown {planned.owner} {q(staging)} && chmod {planned.rendered.mode} "
                f"{q(staging)} && mv -f {q(staging)} {q(planned.rendered.path)}"
                for planned, staging in staged
            ),
        )
        if not ok:
            raise OperationError(f"could not install the service's files: {out}")
    except Exception:
        run_on_host(host_, "rm -f " + " ".join(q(staging) for _, staging in staged))
        raise


def keep_command(path: str) -> str:
    """Keep ``path``'s running version for a rollback: a copy (``.last-good``), or a mark that
    it did not exist (``.absent``). What an interrupted run kept is the version that ran
    before it, so it is never overwritten."""
    q = shlex.quote
    kept, absent = q(path + KEEP_SUFFIX), q(path + ABSENT_SUFFIX)
    return (
        f"if [ -e {kept} ] || [ -e {absent} ]; then :; "
        f"elif [ -f {q(path)} ]; then cp -p {q(path)} {kept}; else : > {absent}; fi"
    )


def restore_command(path: str) -> str:
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


def forget_kept_command(paths: list[str]) -> str:
    q = shlex.quote
    return "rm -f " + " ".join(f"{q(p + KEEP_SUFFIX)} {q(p + ABSENT_SUFFIX)}" for p in paths)


# --- the executor -----------------------------------------------------------------------


def apply_with_rollback(state, host, plan: ApplyPlan) -> bool:
    """Carry ``plan`` out on ``host``, in its turn and with its group; True once healthy.
    pyinfra passes (state, host) to a FunctionCommand function that names them so. A
    failure ends with its message and False (the operation failed): pyinfra prints any
    exception a callback raises as "Unexpected error in Python callback", with a traceback."""
    # A host behind no router and in no group shares nothing with the run's other hosts.
    shares = plan.rolling_key is not None or plan.group_key is not None
    run = coordinator(state) if shares else RunCoordinator()
    group = run.group(plan.group_key)
    if group is not None:
        # With -y pyinfra checks nothing ahead: the members decide as they run, side by side.
        running = {h.name for h in state.inventory.get_active_hosts()}
        group.wait_decided(running & set(plan.group_hosts), DECIDE_TIMEOUT_S)
    try:
        with run.rolling_turn(host, plan):
            _apply(run, state, host, plan)
    except (OperationError, OSError, TimeoutError) as error:
        message = str(error) if isinstance(error, OperationError) else f"{plan.unit}: {error!r}"
        if group is not None:
            group.post(host.name, message)  # the other members stop waiting for this one
            if plan.node_rank == 0:
                group.rank0_failed(message)
        logger.error(f"{host.print_prefix}{message}")
        return False
    return True


def restart_rank0_first(run: RunCoordinator, state, host_, plan: ApplyPlan, unit_list: str):
    """Restart this member's units in the order its SGLang release needs (from 0.5.21): rank
    0 stops first, as its stop drains it and sends the shutdown broadcast the other ranks
    wait for (they ignore SIGTERM, so stopped before it they would wait for the kill
    timeout); the other ranks then stop at once, and every member starts. Members with
    nothing to change in this run restart with the group, driven by the lowest-ranked member
    that applies: a rank 0 left running would hold the group's old rendezvous, and the other
    ranks exit on its broadcast and stay down (they exit 0; Restart=on-failure). Returns rank
    0's host when this member drove it (its health is then this member's to wait for)."""
    q = shlex.quote
    unit = plan.unit
    timeout_s = plan.server_health.timeout_s
    group = run.group(plan.group_key)
    ranks = plan.group_hosts
    applying = group.members | {host_.name}
    idle = [name for name in ranks if name not in applying]
    leader = min(applying, key=ranks.index)
    driven = {name: state.inventory.get_host(name) for name in idle} if host_.name == leader else {}
    for name, other in driven.items():
        if not other.connected:  # left out of this run (--limit): the group needs it anyway
            try:
                other.connect(reason=f"its group {plan.group_key} restarts", raise_exceptions=True)
            except PyinfraError as error:
                group.rank0_failed(f"cannot reach {name}: {error}")
                raise OperationError(
                    f"not restarted: group {plan.group_key} restarts as one and "
                    f"{name} cannot be reached ({error})"
                ) from None
    rank0 = ranks[0]
    if plan.node_rank == 0:
        _run(host_, f"systemctl stop {q(unit)}")
        group.rank0_stopped.set()
    elif rank0 in driven:
        logger.info(f"{host_.print_prefix}{unit}: stopping rank 0 ({rank0}) first, its group's")
        ok, out = run_on_host(driven[rank0], f"systemctl stop {q(unit)}")
        if not ok:
            group.rank0_failed(f"could not stop rank 0 ({rank0}): {out}")
        group.rank0_stopped.set()
    if not group.rank0_stopped.wait(timeout=timeout_s):
        raise OperationError(
            f"group {plan.group_key}: rank 0 ({rank0}) did not stop within "
            f"{timeout_s} s; this node keeps running"
        )
    if group.rank0_problem and plan.node_rank != 0:
        raise OperationError(
            f"not restarted: rank 0 of group {plan.group_key} did not stop "
            f"({group.rank0_problem}); from SGLang 0.5.21 the other ranks stop only after it"
        )
    for name, other in driven.items():
        if name != rank0:
            run_on_host(other, f"systemctl stop {q(unit)}")  # it got the broadcast: at once
    _run(host_, f"systemctl restart {unit_list}")
    for other in driven.values():
        _run(other, f"systemctl reset-failed {q(unit)} 2>/dev/null; systemctl start {q(unit)}")
    return driven.get(rank0)


def _apply(run: RunCoordinator, state, host, plan: ApplyPlan) -> None:
    """Install the files, restart the plan's units and wait for health; on failure put the
    kept files back, stale units included. OperationError says how it ended."""
    q = shlex.quote
    unit = plan.unit
    kept_paths = plan.kept_paths
    if plan.keep_previous:
        _run(host, " && ".join(keep_command(p) for p in kept_paths))
    for stale in plan.stale:
        _run(
            host,
            f"if [ -f {q(stale)} ]; then "
            f"systemctl disable --now {q(Path(stale).name)}; rm -f {q(stale)}; fi",
        )
    install_files(host, plan)
    unit_list = " ".join(q(name) for name in plan.restart)
    # reset-failed: a unit its start limit stopped (a crash loop) would refuse the start.
    enable = (
        f"systemctl daemon-reload && systemctl enable {' '.join(q(name) for name in plan.units)}"
        f" && systemctl reset-failed {unit_list} 2>/dev/null;"
    )
    rank0_host = None
    if plan.restarts_rank0_first:
        _run(host, f"{enable} true")
        rank0_host = restart_rank0_first(run, state, host, plan, unit_list)
    else:
        _run(host, f"{enable} systemctl restart {unit_list}")
    problem = None
    for index, check in enumerate(plan.health):
        problem = wait_healthy(host, check.unit, check.url, check.timeout_s)
        if problem is None and index == 0 and rank0_host is not None:
            # Rank 0 had nothing to change, but restarted with the group: it answers for it.
            problem = wait_healthy(rank0_host, unit, plan.rank0_health_url, check.timeout_s)
        if problem is not None:
            break
    problem = run.group_outcome(host, plan, problem)
    if problem is None:
        _run(host, forget_kept_command(kept_paths))
        logger.info(f"{host.print_prefix}{unit} is healthy ({plan.server_health.url or 'active'})")
        return
    _, journal = _run(host, f"journalctl -u {q(unit)} -n {JOURNAL_LINES} --no-pager -o cat || true")
    # SGLang logs its arguments at start, API keys included (sgl-project/sglang#37457), and
    # this tail goes to the controller's output and CI logs: masked.
    logger.error(
        f"{host.print_prefix}the new configuration did not come up: {problem}; "
        f"{unit}'s journal ends:\n{redact(journal, _known_secrets(host))}"
    )
    if not plan.keep_previous:
        # Nothing to go back to: stopped and disabled, not left to crash-loop (or to reach
        # the Hub) in the background until a later run reports it as running.
        _run(host, f"systemctl disable --now {unit_list}")
        raise OperationError(
            f"the new configuration did not come up ({problem}) "
            f"and there was no previous version to keep: {unit_list} stopped and disabled"
        )
    restore = " ".join(restore_command(p) for p in kept_paths)
    # Every unit whose file is back: those restarted for this run, and a stale one removed.
    again = " ".join(
        f"if [ -f {q(p)} ]; then systemctl enable {q(Path(p).name)} && "
        f"systemctl restart {q(Path(p).name)}; fi;"
        for p in kept_paths
        if p.endswith(".service") and (Path(p).name in plan.restart or p in plan.stale)
    )
    _run(host, f"{restore} systemctl daemon-reload; {again} true")
    server = plan.server_health
    previous = wait_healthy(host, unit, server.url, server.timeout_s)
    state_note = "is healthy again" if previous is None else f"did not come back either: {previous}"
    raise OperationError(
        f"the new configuration did not come up ({problem}); "
        f"rolled back: the previous version {state_note}"
    )
