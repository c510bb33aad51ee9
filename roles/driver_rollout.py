"""Rolling driver upgrades: a host that serves, and whose driver changes on this run, is
upgraded in its turn, never with the whole fleet at once.

At most ``driver_rollout_max_unavailable`` such hosts (1 unless set; "off": no turns) are
out of service at once (hosts already out count). Each in turn: taken out of the router that
lists it (the gateway's worker API, run on the router's host), its server stopped (SGLang
drains the requests it runs on SIGTERM), the driver (and Fabric Manager) changed by the
commands the driver role would run, rebooted where the kernel must load the new module, its
server started, the audit's driver, CUDA, Fabric Manager, GPU-health and decode checks run
(data/rollout.toml [validation]), and only when they pass put back behind its router. A host
that fails stops the rollout: the hosts not yet started keep their driver and keep serving,
the failing one stays out of its router with the reason in its record (data/rollout.toml
[paths] state). A re-run resumes from that record: the host is validated again and rejoins
when it passes. A host the operator marked out of service (``out_of_service``, or the file
at [paths] out_of_service) is upgraded without taking a turn and not put back while it is
marked.

Not a scheduler: pyinfra runs every host's operation side by side as always; a host's
operation only waits for its turn (one gate per pyinfra State).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import OperationError, PyinfraError
from pyinfra.facts.files import File

from checks.audit import read_facts
from checks.facts import StateFile, SystemdUnitState, read_once
from checks.flash_attn_decision import flash_attn_decision
from checks.host_context import host_position, run_on_host, ship_and_run
from checks.run_summary import real
from pyinfra_sglang import data
from pyinfra_sglang.audit.judge import judge
from pyinfra_sglang.audit.record import AuditExpectations
from pyinfra_sglang.audit.rollout_gate import validation_problems
from pyinfra_sglang.config.fields.rollout import DEFAULT_MAX_UNAVAILABLE
from pyinfra_sglang.driver.rollout import (
    FAILED,
    OUT,
    RolloutRecord,
    read_record,
    unavailable_budget,
)
from pyinfra_sglang.inventory import host_config, host_profile, router_of
from pyinfra_sglang.serving.service_files import UNIT_NAME, server_url
from pyinfra_sglang.serving.watchdog import timer_unit
from roles.service_apply import wait_healthy

COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class RolloutNeed:
    """Whether this host's driver change goes through a turn, read at planning."""

    rolls: bool  # the driver changes while it serves, or a rollout left it out
    operator_out: str | None  # why the operator marked it out of service, or None
    record: RolloutRecord | None  # a rollout's record found on the host
    record_unreadable: bool = False


def rollout_facts() -> tuple[tuple[type, dict], ...]:
    """What rollout_need reads, on every run (the record is how a stopped rollout resumes):
    read with the running driver's facts, in the same command."""
    paths = data.rollout().paths
    return (
        (StateFile, {"path": paths.state}),
        (File, {"path": paths.out_of_service}),
        (SystemdUnitState, {"unit": UNIT_NAME}),
    )


def rollout_need(changing: bool) -> RolloutNeed:
    """Read on the current host at planning: does the driver change go through a turn? Not
    for a multi-node member: its group serves only with every member up, so the group
    changes together, as its restarts do."""
    config = host_config(host)
    if config.sglang_multinode_group:
        return RolloutNeed(False, None, None)
    paths = data.rollout().paths
    state = read_once(host, StateFile, path=paths.state)
    record = read_record(state["record"])
    unreadable = state["present"] and record is None
    marked = read_once(host, File, path=paths.out_of_service)
    operator_out = (
        "out_of_service = true in the inventory"
        if config.out_of_service
        else f"{paths.out_of_service} is on the host"
        if marked
        else None
    )
    serving = read_once(host, SystemdUnitState, unit=UNIT_NAME).get("ActiveState") == "active"
    # A host the operator keeps out is upgraded when its driver changes, and otherwise left
    # alone: it rejoins through its record once the mark is gone.
    rolling = config.driver_rollout_max_unavailable is not None
    rolls = changing and rolling and (serving or operator_out is not None or state["present"])
    rolls = rolls or (state["present"] and operator_out is None)
    return RolloutNeed(rolls, operator_out, record, unreadable)


# --- the run's gate ---------------------------------------------------------------------


@dataclass
class FleetRollout:
    """One run's rollout: the hosts registered at planning, who is out now, who failed."""

    budgets: dict[str, int] = field(default_factory=dict)
    out: set[str] = field(default_factory=set)
    operator_out: set[str] = field(default_factory=set)
    positions: dict[str, int] = field(default_factory=dict)  # hosts in service, by place
    order: list[str] = field(default_factory=list)  # those, in the inventory's order
    passed: set[str] = field(default_factory=set)  # of those, who took or lost their turn
    most_out: int = 0
    failed: tuple[str, str] | None = None

    @property
    def limit(self) -> int:
        return min(self.budgets.values(), default=1)

    def register(
        self, name: str, budget: int, already_out: bool, operator_out: bool, position: int = 0
    ) -> None:
        """A host whose change rolls, at its ``position`` in the inventory (pyinfra may plan
        the hosts in another order)."""
        self.budgets[name] = budget
        if already_out or operator_out:
            self.out.add(name)
        else:
            self.positions[name] = position
            self.order = sorted(self.positions, key=lambda n: (self.positions[n], n))
        if operator_out:
            self.operator_out.add(name)
        self.most_out = max(self.most_out, len(self.out))

    def take_turn(self, name: str, gone: Callable[[str], bool] = lambda name: False) -> None:
        """Wait until this host may go out of service: the hosts before it in the inventory
        went (or are ``gone`` from the run), and fewer than the budget are out. At once when
        it is out already. OperationError once another host failed, or when no turn can come."""
        if name in self.out:
            return
        try:
            while True:
                self._refuse()
                ahead = self.order[: self.order.index(name)]
                waiting = [n for n in ahead if n not in self.passed and not gone(n)]
                if not waiting and len(self.out) < self.limit:
                    self.out.add(name)
                    self.most_out = max(self.most_out, len(self.out))
                    return
                gevent.sleep(0.2)
        finally:
            self.passed.add(name)

    def _refuse(self) -> None:
        if self.failed:
            who, why = self.failed
            raise OperationError(
                f"not changed: the driver rollout stopped at {who} ({why}); this host keeps "
                "its driver and keeps serving"
            )
        if len(self.operator_out) >= self.limit:
            raise OperationError(
                f"not changed: {len(self.operator_out)} host(s) out of service already "
                f"({', '.join(sorted(self.operator_out))}) and driver_rollout_max_unavailable "
                f"allows {self.limit}: no host can leave its router; raise it, or bring "
                "them back first"
            )

    def done(self, name: str) -> None:
        if name not in self.operator_out:
            self.out.discard(name)

    def fail(self, name: str, why: str) -> None:
        self.failed = self.failed or (name, why)


_ROLLOUTS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> FleetRollout


def fleet_rollout(state) -> FleetRollout:
    return _ROLLOUTS.setdefault(real(state), FleetRollout())


def register_rollout(state, need: RolloutNeed) -> None:
    """At planning, for every host whose driver change rolls: its budget, and whether it is
    out of service already (the gate must know before any host takes a turn)."""
    config = host_config(host)
    # A host resuming from its record counts as out whether or not rolling is still set.
    limit = config.driver_rollout_max_unavailable or DEFAULT_MAX_UNAVAILABLE
    budget = unavailable_budget(limit, len(host.inventory))
    already = need.record is not None or need.record_unreadable
    position = [h.name for h in host.inventory].index(host.name)
    fleet_rollout(state).register(
        host.name, budget, already, need.operator_out is not None, position
    )


# --- on the hosts -----------------------------------------------------------------------


def _run(host_, command: str | StringCommand, what: str) -> str:
    ok, output = run_on_host(host_, command, _timeout=COMMAND_TIMEOUT_S)
    if not ok:
        tail = "\n".join(output.splitlines()[-5:])
        raise OperationError(f"{what} failed on {host_.name}: {tail}")
    return output


def write_record(host_, record: RolloutRecord) -> None:
    path = data.rollout().paths.state
    q = shlex.quote
    folder = q(path.rsplit("/", 1)[0])
    _run(
        host_,
        # mkdir, not install -d -m: the folder is the model programs' too (0755), whose mode
        # must not change; the record itself is root's 0600 (umask).
        f"mkdir -p {folder} && umask 077 && "
        f"printf %s {q(record.text())} > {q(path + '.new')} && mv -f {q(path + '.new')} {q(path)}",
        "writing the rollout record",
    )


def forget_record(host_) -> None:
    _run(host_, f"rm -f {shlex.quote(data.rollout().paths.state)}", "removing the rollout record")


def router_call(state, router_name: str, action: str, worker_url: str) -> None:
    """Take ``worker_url`` out of the router on ``router_name``, or put it back, and wait
    until the router says so (router_workers.py, run on the router's host)."""
    router = state.inventory.get_host(router_name)
    if not router.connected:
        router.connect(raise_exceptions=True)
    config = host_config(router)
    bind = config.router_bind()
    address = "127.0.0.1" if bind.is_unspecified else str(bind)
    address = f"[{address}]" if ":" in address else address
    args = [f"http://{address}:{config.sglang_router_port}", action, worker_url]
    args += ["--timeout", str(int(data.rollout().router.change_timeout_s))]
    if config.sglang_router_api_key_file:
        args += ["--env-file", data.sglang_service().router.env_path]
    ok, output = run_on_host(
        router, ship_and_run("router_workers.py", "python3", args), _timeout=COMMAND_TIMEOUT_S + 60
    )
    if not ok:
        raise OperationError(
            f"router {router_name}: {action} {worker_url}: {output.strip()[-400:] or 'no answer'}"
        )


def run_commands(state, host_, commands: list) -> None:
    """The driver role's commands, in order, on this host; the first failure stops them."""
    for command in commands:
        if isinstance(command, FunctionCommand):
            ok = command.execute(state, host_, {})
            output = ""
        else:
            ok, lines = command.execute(state, host_, {"_timeout": 3600})
            output = "\n".join(line.line for line in lines)
        if not ok:
            tail = "\n".join(output.splitlines()[-5:])
            raise OperationError(f"the driver change failed on {host_.name}: {tail}")


def validate(host_) -> list[str]:
    """The audit's reading and judgement of this host now, and what of it keeps the host out
    of its router ([] to rejoin)."""
    config = host_config(host_)
    rank = host_position(config, host_).rank
    expected = AuditExpectations.from_config(config, UNIT_NAME, rank, flash_attn_decision(config))
    findings = judge(expected, read_facts(config, expected))
    return validation_problems(findings, serving=True)


@dataclass(frozen=True)
class Turn:
    """What one host's turn carries out."""

    target: str
    commands: tuple
    operator_out: str | None
    record: RolloutRecord | None
    watchdog: bool


def carry_out_turn(state, host, turn: Turn) -> bool:
    """This host's turn: out of its router, upgraded, validated, back in. False (the
    operation failed) with the reason logged when any step fails."""
    fleet = fleet_rollout(state)
    try:
        # A host ahead whose run failed before its turn gives its place up.
        fleet.take_turn(host.name, gone=lambda name: name in {h.name for h in state.failed_hosts})
    except OperationError as error:
        logger.error(f"{host.print_prefix}{error}")
        return False
    try:
        _turn(state, host, turn)
    except (OperationError, OSError, PyinfraError) as error:
        fleet.fail(host.name, str(error).splitlines()[0])
        logger.error(f"{host.print_prefix}{error}")
        return False
    fleet.done(host.name)
    return True


def _turn(state, host_, turn: Turn) -> None:
    routed = router_of(host_)
    router, worker = routed if routed else (None, None)
    record = turn.record or RolloutRecord(OUT, turn.target, router, worker)
    write_record(host_, record)
    if router and worker:
        try:
            router_call(state, router, "remove", worker)
        except (OperationError, OSError, PyinfraError):
            if turn.record is None:
                forget_record(host_)  # still in its router and serving: nothing to resume
            raise
        logger.info(f"{host_.print_prefix}out of router {router}: upgrading to {turn.target}")
    try:
        _out_of_service(state, host_, turn, router, worker)
    except (OperationError, OSError, PyinfraError) as error:
        # Out of its router, maybe half changed: the record says why, and the next run
        # validates it again before it rejoins.
        why = str(error).splitlines()[0]
        failed = RolloutRecord(FAILED, turn.target, router, worker, why)
        try:
            write_record(host_, failed)
        except (OperationError, OSError):
            pass  # the OUT record stays: the next run resumes from it all the same
        raise


def _out_of_service(state, host_, turn: Turn, router: str | None, worker: str | None) -> None:
    """The turn once the host is out of its router: changed, validated, back."""
    units = [timer_unit()] if turn.watchdog else []
    # The watchdog would restart the server it finds stopped (a timer not installed yet is
    # nothing to stop); SIGTERM drains the server.
    for unit in units:
        _run(host_, f"systemctl stop {shlex.quote(unit)} 2>/dev/null || true", "stop")
    _run(host_, f"systemctl stop {shlex.quote(UNIT_NAME)}", "stopping the server")
    run_commands(state, host_, list(turn.commands))
    config = host_config(host_)
    _run(host_, f"systemctl start {shlex.quote(UNIT_NAME)}", "starting the server")
    problem = wait_healthy(
        host_, UNIT_NAME, f"{server_url(config)}/health", host_profile(config).start_timeout_s
    )
    problems = [problem] if problem else validate(host_)
    if problems:
        raise OperationError(
            f"validation on {turn.target} failed, the host stays out of its router: "
            + "; ".join(problems)
        )
    if units:
        _run(host_, "systemctl start " + " ".join(shlex.quote(u) for u in units), "watchdog")
    if turn.operator_out:
        # Its record stays: once the operator's mark is gone, a run puts it back.
        logger.warning(
            f"{host_.print_prefix}upgraded to {turn.target} and validated; stays out of "
            f"service: {turn.operator_out}"
        )
        return
    if router and worker:
        router_call(state, router, "add", worker)
        logger.info(f"{host_.print_prefix}back in router {router} on {turn.target}")
    forget_record(host_)


@operation(is_idempotent=False)
def driver_rollout(
    target: str, commands: list, operator_out: str | None, record: RolloutRecord | None
):
    """Upgrade the driver in this host's turn: out of its router, upgraded, validated, back.

    + target: the driver it moves to, in words
    + commands: the driver role's commands for the change
    + operator_out: why the operator keeps it out of service, or None
    + record: the rollout record a previous run left on the host
    """
    config = host_config(host)
    turn = Turn(target, tuple(commands), operator_out, record, config.sglang_watchdog)
    yield FunctionCommand(carry_out_turn, (turn,), {})
