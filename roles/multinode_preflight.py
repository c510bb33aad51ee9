"""The all-reduce preflight of a multi-node group, before its servers start: every member
runs host_programs/allreduce_preflight.py at once, with the venv's torch, at the group's
rendezvous address and port (free while no server runs), over the interface the server's
env file names. A group that cannot all-reduce fails here in a bounded time, with numbers,
instead of hanging in NCCL's init after minutes of loading."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

import gevent
from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.systemd import SystemdStatus

from checks.facts import read_once
from checks.host_context import group_interface, host_position, run_on_host, ship_and_run
from checks.run_summary import real
from pyinfra_sglang import data
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.network.preflight import preflight_verdict
from pyinfra_sglang.serving.service_files import UNIT_NAME, multinode_interface_env

PROGRAM = "allreduce_preflight.py"
# The bootstrap variables the server's env file sets; the preflight runs with the same.
BOOTSTRAP_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass
class GroupPreflight:
    """One group's preflight in one run: whether each member's server runs, as each member
    planned it."""

    servers: dict[str, bool] = field(default_factory=dict)


_RUNS: dict[tuple[int, str], GroupPreflight] = {}


def group_preflight(group: str) -> GroupPreflight:
    return _RUNS.setdefault((id(real(state)), group), GroupPreflight())


def wait_for_members(run: GroupPreflight, members: tuple[str, ...], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not set(members) <= set(run.servers) and time.monotonic() < deadline:
        gevent.sleep(0.2)


def preflight_command(
    interpreter: str, rank: int, world: int, rendezvous: str, env: dict[str, str], timeout_s: int
) -> str:
    """The program under timeout(1), its exit status printed last: 124 tells a stopped run
    from a failed one."""
    settings = data.multinode_preflight()
    q = shlex.quote
    args = [
        *("--rank", str(rank), "--world", str(world), "--rendezvous", rendezvous),
        *("--size-mib", str(settings.size_mib), "--iterations", str(settings.iterations)),
        *("--timeout-s", str(timeout_s)),
    ]
    exports = "".join(f"export {name}={q(value)}\n" for name, value in sorted(env.items()))
    limit = timeout_s + settings.kill_after_s
    run = ship_and_run(PROGRAM, interpreter, args, wrapper=("timeout", "-k", "5", str(limit)))
    return f"({exports}{run}); echo preflight-exit=$?"


def exit_code_of(output: str) -> tuple[str, int]:
    lines = output.rstrip().splitlines()
    if lines and lines[-1].startswith("preflight-exit="):
        return "\n".join(lines[:-1]), int(lines[-1].split("=", 1)[1])
    return output, -1


def members_state(run: GroupPreflight, members: tuple[str, ...]) -> tuple[str, list[str]]:
    """("missing", the members that did not plan the preflight in this run), ("running",
    those whose server runs: another member holds the rendezvous port and would not join),
    or ("start", []): the group starts from nothing, the preflight runs."""
    missing = [m for m in members if m not in run.servers]
    if missing:
        return "missing", missing
    running = [m for m in members if run.servers[m]]
    return ("running", running) if running else ("start", [])


def _run(state, host, command: str, group: str, members: tuple[str, ...], timeout_s: int):
    """pyinfra passes (state, host) to a function that names them so."""
    run = group_preflight(group)
    wait_for_members(run, members, data.multinode_preflight().join_timeout_s)
    found, names = members_state(run, members)
    if found == "missing":
        raise OperationError(
            f"multi-node preflight of {group}: {', '.join(names)} did not reach it in this "
            "run; the group's servers are not started"
        )
    if found == "running":
        logger.warning(
            f"{host.print_prefix}multi-node preflight of {group} not run: the server runs on "
            f"{', '.join(names)}"
        )
        return True
    _, output = run_on_host(host, command, _timeout=timeout_s + 120)
    text, code = exit_code_of(output)
    verdict = preflight_verdict(text, code, timeout_s)
    if verdict.level == "fail":
        raise OperationError(f"multi-node preflight of {group}: {verdict.text}")
    say = logger.warning if verdict.level == "warn" else logger.info
    say(f"{host.print_prefix}multi-node preflight of {group}: {verdict.text}")
    return True


@operation()
def group_allreduce():
    """Run the all-reduce preflight where no member of this host's group runs its server
    (the group is about to start); a no-op where this host's server runs."""
    config = host_config(host)
    group = config.sglang_multinode_group
    members = tuple(m.name for m in host.inventory.get_group(group))
    server_runs = read_once(host, SystemdStatus).get(UNIT_NAME, False)
    group_preflight(group).servers[host.name] = server_runs
    if server_runs:
        host.noop(f"{UNIT_NAME} runs: the preflight runs only before the group starts")
        return
    node = host_position(config, host)
    env = {**multinode_interface_env(config, group_interface(config, host)), **config.sglang_env}
    bootstrap = {name: env[name] for name in BOOTSTRAP_VARIABLES if name in env}
    timeout_s = config.sglang_multinode_preflight_timeout_s
    command = preflight_command(
        f"{config.venv_path}/bin/python",
        node.rank,
        node.nnodes,
        node.dist_init_addr,
        bootstrap,
        timeout_s,
    )
    yield FunctionCommand(_run, (command, group, members, timeout_s), {})


@deploy("Multi-node preflight")
def multinode_preflight() -> None:
    """Before a multi-node group's servers start: an all-reduce across its members.

    Every member runs torch.distributed (Gloo) at once, at the group's rendezvous address and
    port, over the interface its server will bootstrap over. A member that cannot join, a
    wrong sum or a bus bandwidth below a fraction of the interface's line rate fails the run
    before the servers load; bounded by a timeout, never a hang.

    + sglang_multinode_group: the group
    + sglang_multinode_preflight: run it (default true)
    + sglang_multinode_preflight_timeout_s: its rendezvous and collectives' timeout
    """
    config = host_config(host)
    group = config.sglang_multinode_group
    if not group or not config.sglang_multinode_preflight:
        return
    if len(host.inventory.get_group(group)) < 2:
        return
    group_allreduce(name=f"All-reduce across multi-node group {group} before its servers start")
