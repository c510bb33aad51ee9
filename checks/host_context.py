"""What operations need from the pyinfra host they run on, beyond facts: its connector
arguments, its place in a multi-node group, and shipping a host program to it."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyinfra import logger
from pyinfra.api import OperationError, StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from checks.facts import RouteTo, read_once
from pyinfra_sglang.access.transfer_folder import UNELEVATED, elevated
from pyinfra_sglang.host_programs import program_path
from pyinfra_sglang.inventory import HostConfig, member_address, node_position_in
from pyinfra_sglang.serving.placement import NodePosition


def connector_arguments(host) -> dict:
    """The running operation's connector arguments (``_sudo``, ``_su_user``, ...). Facts and
    yielded commands get them from pyinfra; direct ``run_shell_command``/``put_file``/``get_file``
    calls from inside an operation must pass them on, or they run as the SSH user."""
    current = host.current_op_global_arguments or {}
    return {key: current[key] for key in CONNECTOR_ARGUMENT_KEYS if key in current}


@contextmanager
def transfer_arguments(host) -> Iterator[Callable[[str], dict]]:
    """For ``put_file``/``get_file`` calls from inside an operation: a function of the remote
    path giving the keyword arguments of the call. Under elevation pyinfra passes the file
    through a temporary file of a predictable name (pyinfra_sglang.access.transfer_folder); here
    that file lies in a new folder only the SSH user can enter (``mktemp -d``, as that user),
    removed after."""
    arguments = connector_arguments(host)
    if not elevated(arguments):
        yield lambda remote: arguments
        return
    ok, output = host.run_shell_command("mktemp -d", **UNELEVATED)
    lines = [line.line.strip() for line in output]
    folder = lines[-1] if ok and lines else ""
    if not folder.startswith("/") or not folder.isprintable():
        raise OperationError(f"host {host.name}: mktemp -d failed as the SSH user: {lines}")
    try:
        # One name a remote path, as pyinfra names its own (sha1 of the path).
        yield lambda remote: {
            **arguments,
            "remote_temp_filename": f"{folder}/pyinfra-{hashlib.sha1(remote.encode()).hexdigest()}",
        }
    finally:
        host.run_shell_command(f"rm -rf -- {shlex.quote(folder)}", **UNELEVATED)


def run_on_host(host, command: str | StringCommand, **arguments) -> tuple[bool, str]:
    """Run a command from inside an operation with its connector arguments (``arguments``,
    e.g. ``_timeout``, added or overriding): (ok, output). Quote every value in ``command``
    that is not a constant (StringCommand + QuoteString, or shlex.quote)."""
    ok, output = host.run_shell_command(command, **{**connector_arguments(host), **arguments})
    return ok, "\n".join(line.line for line in output)


def host_position(config: HostConfig, host) -> NodePosition:
    """The host's place in its multi-node group, from the inventory's group order."""
    return node_position_in(config, host)


def ship_and_run(
    program: str,
    interpreter: str,
    args: list[str],
    beside: tuple[str, ...] = (),
    setup: str = "",
    wrapper: tuple[str, ...] = (),
) -> str:
    """Shell that runs a host program (pyinfra_sglang/host_programs/``program``) on the host:
    written with the programs ``beside`` it to a temporary folder ``$probe`` first (a probe
    that spawns processes needs a real file), removed after. ``setup``: shell run in that
    folder's presence before the program (it may use ``$probe``). ``wrapper``: a command the
    interpreter runs under (timeout(1) and its arguments)."""
    writes = "".join(
        f"cat > \"$probe\"/{shlex.quote(name)} <<'PYINFRA_SGLANG_EOF'\n"
        f"{program_path(name).read_text()}\nPYINFRA_SGLANG_EOF\n"
        for name in (program, *beside)
    )
    quoted = " ".join(shlex.quote(arg) for arg in args)
    wrapped = "".join(f"{shlex.quote(word)} " for word in wrapper)
    return (
        # No folder, no run: the writes below would otherwise land in /.
        "probe=$(mktemp -d) || exit 1\n"
        f"{writes}{setup}"
        f'{wrapped}{shlex.quote(interpreter)} "$probe"/{shlex.quote(program)} {quoted}; rc=$?; '
        'rm -rf "$probe"; exit $rc'
    )


def group_interface(config: HostConfig, host) -> str | None:
    """The interface this multi-node member routes to the others through (to the rendezvous
    host; the rendezvous host to the next member): Gloo and NCCL bootstrap over it. None when
    the inventory names one (sglang_multinode_interface), outside a group, when the route is
    the host's own (members sharing one machine), or when there is none (said, not guessed).
    The service role renders with it and the audit compares with it."""
    group = config.sglang_multinode_group
    members = [m.name for m in host.inventory.get_group(group)] if group else []
    if config.sglang_multinode_interface or len(members) < 2:
        return None
    peer = members[1] if host.name == members[0] else members[0]
    address = member_address(host.inventory.get_host(peer))
    route = read_once(host, RouteTo, address=address)
    if route is None:
        if (id(host.state), host.name) not in _NO_ROUTE_SAID:  # asked for each file set
            _NO_ROUTE_SAID.add((id(host.state), host.name))
            logger.warning(
                f"{host.print_prefix}no route to {peer} ({address}): Gloo and NCCL pick "
                "their interface themselves; set sglang_multinode_interface to the group's"
            )
        return None
    # The peer's address is this host's own: the members share one machine (the site test
    # hosts), where the loopback is the path.
    return None if route["local"] else route["interface"]


_NO_ROUTE_SAID: set[tuple[int, str]] = set()
