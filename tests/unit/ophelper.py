"""Run a pyinfra operation's generator against given fact values, as pyinfra's own
operation tests do: facts in, commands and noop reasons out, no host touched.

Cases are data, like the case files of pyinfra's own operation tests (args, facts, commands,
noop_description): ``op_case`` makes one, and a test file's one runner checks each of them
for the whole list of commands and noop reasons the operation yields.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any
from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_host, ctx_state

# The parameter names of a runner that takes ``op_case`` cases.
OP_CASE_FIELDS = ("op", "facts", "args", "commands", "noops", "executing")


def run_operation(
    op, facts: dict[type, Any], executing: bool = True, **kwargs
) -> tuple[list[str], list[str]]:
    """Return (commands, noop reasons) that ``op`` yields for a host with ``facts``.

    ``facts`` maps a FactBase class to its value; a fact the operation reads that is not
    given fails the test, so the facts an operation depends on are visible in each test.
    ``executing``: pyinfra runs an operation's generator when it executes it (and, before,
    when it detects changes; ``executing=False``).
    """
    inventory = Inventory((["op-test-host"], {}))
    state = State(inventory=inventory, config=Config())
    state.is_executing = executing
    host = inventory.get_host("op-test-host")
    noops: list[str] = []

    def get_fact(cls, *args, **fact_kwargs):
        if cls not in facts:
            raise AssertionError(f"operation read fact {cls.__name__}, not given by the test")
        value = facts[cls]
        return value(*args, **fact_kwargs) if callable(value) else value

    with ctx_state.use(state), ctx_host.use(host):
        with (
            patch.object(host, "get_fact", side_effect=get_fact),
            patch.object(host, "noop", side_effect=noops.append),
        ):
            commands = [str(command) for command in op._inner(**kwargs)]
    return commands, noops


def op_case(
    op,
    id: str,
    facts: dict[type, Any],
    args: dict[str, Any] | None = None,
    *,
    commands: Sequence[str] = (),
    noops: Sequence[str] = (),
    executing: bool = True,
):
    """One case for a runner parametrized with ``OP_CASE_FIELDS``: ``op`` called with
    ``args`` on a host with ``facts`` yields exactly ``commands`` (each in its string form,
    a FunctionCommand included) and exactly ``noops``. Its id is ``<operation>-<id>``."""
    return pytest.param(
        op, facts, args or {}, list(commands), list(noops), executing, id=f"{op.__name__}-{id}"
    )


_UNIT_VARIABLE = re.compile(r"\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def transient_unit_script(command: str) -> str:
    """The script a ``systemd-run ... /bin/sh -c SCRIPT`` command line runs, as systemd hands
    it to the shell: "$$" becomes "$", and ``${NAME}`` becomes nothing (no test unit sets a
    name; systemd.service(5), "Command lines"), so a '$' the command failed to double shows."""
    word = re.search(r"/bin/sh -c ('(?:[^']|'\"'\"')*')", command)[1]
    [script] = shlex.split(word)
    return _UNIT_VARIABLE.sub(lambda match: "$" if match[0] == "$$" else "", script)
