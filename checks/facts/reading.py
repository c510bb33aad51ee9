"""How facts are read: once a run unless an operation changed the host, several in one command."""

from __future__ import annotations

import shlex
import weakref
from typing import TypeVar

from pyinfra.api import FactBase, Host, State, StringCommand
from pyinfra.api.util import get_kwargs_str
from pyinfra.context import ContextObject

T = TypeVar("T")


# A fact read once a run: pyinfra 3.10 caches no fact (api/facts.py runs the command on every
# ``get_fact``), several roles read the same one (DebPackages, NvidiaGpus, ...), deploy bodies
# read at planning what operations read again at execution, and without -y each operation's
# body runs twice, to plan and to execute. A value read while the host was unchanged is still
# its state while no operation of that host has executed commands since: read_once keeps it
# until then. Kept per host object, so a run's hosts (and a test's) start empty.
_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def changes_so_far(host) -> int:
    """How many of ``host``'s operations have executed commands in this run (0 while
    planning): any of them may have changed what a fact reads."""
    state = host.state
    if not state.is_executing:
        return 0
    ops = state.ops.get(host, {})
    return sum(
        1
        for op_data in ops.values()
        if op_data.operation_meta.is_complete() and op_data.operation_meta.executed
    )


def _current(host) -> Host:
    return host._get_module() if isinstance(host, ContextObject) else host


def read_once(host, cls: type[FactBase[T]], **kwargs) -> T:
    """``host.get_fact(cls, **kwargs)``, read from the host only the first time in a run, and
    again after an operation of this host has executed commands (changes_so_far). For an
    operation's body before it yields and for deploy bodies; a loop that waits for the host
    to change (a FunctionCommand) reads with ``host.get_fact``."""
    # Roles pass pyinfra's context proxy for the current host: keep by the host itself.
    this = _current(host)
    if not isinstance(this, Host) or not isinstance(this.state, State):
        return host.get_fact(cls, **kwargs)  # a test's stand-in host: nothing to keep
    host = this
    key = _key(cls, kwargs)
    changes = changes_so_far(host)
    known = _read.setdefault(host, {})
    if key in known and known[key][0] == changes:
        return known[key][1]
    group = _groups.get(host, {}).get(key)
    if group is not None:
        _read_group(host, group, changes, known)
        if key in known and known[key][0] == changes:
            return known[key][1]
    value = host.get_fact(cls, **kwargs)
    known[key] = (changes, value)
    return value


def _key(cls: type[FactBase], kwargs: dict) -> tuple:
    return (cls, repr(sorted(kwargs.items())))


# One member's section in the output of Facts: its start, and its end with its exit status.
_BEGIN = "### pyinfra-sglang fact "


_END = "### pyinfra-sglang fact-rc "


_MISSING = "### pyinfra-sglang no-command"


class Facts(FactBase[list]):
    """Several facts in one command, for read_together: each member ``(fact class, kwargs)``
    runs its own command in a subshell of its own section, and its own process() reads that
    section, as pyinfra's get_fact would (no output: the default; the program that
    ``requires_command`` names missing: the default). A member whose command failed, or
    whose process() raised, is None: read alone, it fails as it would have."""

    _members: tuple = ()

    def command(self, members: tuple[tuple[type[FactBase], dict], ...]) -> StringCommand:
        # pyinfra calls process() on the instance it asked for the command: keep the members.
        self._members = members
        parts: list = []
        for n, (cls, kwargs) in enumerate(members):
            fact = cls()
            command = fact.command(**kwargs)
            needs = fact.requires_command(**kwargs)
            if needs:
                command = StringCommand(
                    "if command -v",
                    shlex.quote(needs),
                    ">/dev/null 2>&1; then (",
                    command,
                    f"); else echo '{_MISSING}'; fi",
                )
            parts += [f"echo '{_BEGIN}{n}'; (", command, f'); echo "{_END}{n} $?";']
        return StringCommand(*parts, "true")

    def process(self, output) -> list:
        sections: dict[int, list[str]] = {}
        status: dict[int, int] = {}
        current = None
        for line in output:
            if line.startswith(_BEGIN):
                current = int(line[len(_BEGIN) :])
                sections[current] = []
            elif line.startswith(_END):
                n, rc = line[len(_END) :].split()
                status[int(n)] = int(rc)
                current = None
            elif current is not None:
                sections[current].append(line)
        values = []
        for n, (cls, _) in enumerate(self._members):
            lines = sections.get(n)
            if lines is None or status.get(n) != 0:
                values.append(None)
                continue
            fact = cls()
            try:
                missing = lines == [_MISSING]
                values.append((fact.default() if missing or not lines else fact.process(lines),))
            except Exception:
                values.append(None)
        return values


class _Members(tuple):
    """Facts' members as pyinfra logs them ("Loaded fact Facts (members=...)"): their names
    and arguments, not their classes' reprs."""

    def __str__(self) -> str:
        return (
            "["
            + ", ".join(
                cls.__name__ + (f"({get_kwargs_str(kwargs)})" if kwargs else "")
                for cls, kwargs in self
            )
            + "]"
        )


# The groups read_together declared, per host: each member's key to the whole group.
_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read_together(host, *members: tuple[type[FactBase], dict]) -> None:
    """Declare ``members`` (``(fact class, kwargs)``: facts of one concern, the same tool or
    the same files) read together: the first read_once of any of them reads all those not
    kept yet in one command, where read_once would send one each, when it is needed: while
    planning if a deploy body reads one, else in the first operation that does (pyinfra runs
    an operation on all hosts at once, but a deploy file host after host). A member that
    failed is left for read_once to read alone."""
    this = _current(host)
    if not isinstance(this, Host) or not isinstance(this.state, State):
        return  # a test's stand-in host: read_once reads each
    group = tuple(members)
    declared = _groups.setdefault(this, {})
    for cls, kwargs in group:
        # The first declaration stands: a deploy body's group is read whole by whichever
        # operation reads one of its members first.
        declared.setdefault(_key(cls, kwargs), group)


def _read_group(host: Host, group: tuple, changes: int, known: dict) -> None:
    """Read the members of ``group`` read_once does not keep (for ``changes``) in one
    command, and keep their values."""
    if not host.connected:
        return  # a test's stand-in host (never connected): read_once reads each
    due = []
    for cls, kwargs in group:
        key = _key(cls, kwargs)
        if not (key in known and known[key][0] == changes) and key not in (k for k, _ in due):
            due.append((key, (cls, kwargs)))
    if len(due) < 2:
        return  # one fact: read_once reads it alone, under its own name
    values = host.get_fact(Facts, members=_Members(member for _, member in due))
    for (key, _), value in zip(due, values or ()):
        if value is not None:
            known[key] = (changes, value[0])
