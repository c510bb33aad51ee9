"""What a pyinfra run of this project says at its end, read off pyinfra's own state: one line
a host (ok, changed N, failed and why, unreachable and why; for ``--dry``, what would change),
and what the run was started with (the inventory remediations name).

A deploy file calls ``run_summary(state)`` once per host it is loaded for; the first call
registers one pyinfra state callback handler (``State.add_callback_handler``). pyinfra calls
its ``host_disconnect`` for every host it connected to when the run ends, ``--dry`` runs and
failed runs too (the CLI disconnects in a ``finally``), after its results table: the
summary prints after the last one.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from functools import cache

import gevent
import pyinfra
from pyinfra import logger
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.context import ContextObject

from pyinfra_sglang.access.connect_advice import connect_advice, unreachable_reason
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.run_summary import HostOutcome, one_line, summary_lines
from pyinfra_sglang.serving.service_files import read_secrets

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "[host] " or "[host] nested " and the rest: how pyinfra prefixes a host's log lines.
_HOST_LINE = re.compile(r"^\[(?P<host>[^\]]+)\]\s+(?:nested\s+)?(?P<text>.*)", re.S)
# pyinfra's own closing line of a failed operation says only how many commands ran.
_GENERIC_ERROR = re.compile(r"^Error( \(ignored[^)]*\))?:? ?(executed \d+ commands.*)?$")


def cli_arguments() -> dict | None:
    """This run's arguments as pyinfra's own CLI parses them (its click command, callbacks
    off: nothing runs), e.g. ``inventory``, ``dry``, ``yes``; None outside the pyinfra CLI."""
    if not pyinfra.is_cli:
        return None
    return _parse(tuple(sys.argv[1:]))


@cache
def _parse(argv: tuple[str, ...]) -> dict | None:
    from pyinfra_cli.cli import cli

    try:
        context = cli.make_context("pyinfra", list(argv), resilient_parsing=True)
    except Exception:  # pyinfra parsed it already; an odd argv means "not known", no crash
        return None
    return dict(context.params)


def run_inventory() -> str | None:
    """The inventory this run was started with, as given (a path, ``@local``...)."""
    arguments = cli_arguments() or {}
    inventory = arguments.get("inventory")
    return str(inventory) if inventory else None


def dry_run() -> bool:
    return bool((cli_arguments() or {}).get("dry"))


class _FirstErrors(logging.Handler):
    """The first error pyinfra logs for each host while operations execute: the one reason
    a failure leaves when neither our code nor the command's output gave one (an exception
    in an operation's Python callback is only logged)."""

    def __init__(self, state):
        super().__init__(logging.WARNING)
        self.state = state
        self.first: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if self.state.current_stage != StateStage.Execute:
            return
        try:
            message = _ANSI.sub("", record.getMessage()).strip()
        except Exception:  # never let a summary break pyinfra's logging
            return
        match = _HOST_LINE.match(message)
        if not match:
            return
        text = match["text"].strip()
        callback_error = "Unexpected error in Python callback" in text
        if record.levelno < logging.ERROR and not callback_error:
            return
        if text and not _GENERIC_ERROR.match(text):
            self.first.setdefault(match["host"], text)


class ConnectAdvice(logging.Handler):
    """While pyinfra connects, after each connection error it logs ("[host] Could not
    connect (...)"), one line: what to do about it. Installed by config.py, which pyinfra
    runs before it connects: when no host is left the run ends in "No hosts remaining!"
    before any deploy file (and the summary) is loaded."""

    def __init__(self, state):
        super().__init__(logging.ERROR)
        self.state = state

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self.state, "current_stage", StateStage.Connect) != StateStage.Connect:
            return
        match = _HOST_LINE.match(_ANSI.sub("", record.getMessage()))
        if not match or match["text"].startswith("unreachable:"):
            return  # not a host's line, or this handler's own
        advice = connect_advice(match["text"])
        if advice:
            logger.error(f"[{match['host']}] unreachable: {advice}")


def explain_connect_errors(state) -> None:
    """Install ConnectAdvice once for this run (config.py calls it)."""
    if not any(isinstance(h, ConnectAdvice) for h in logger.handlers):
        logger.addHandler(ConnectAdvice(real(state)))


class RunSummary(BaseStateCallback):
    """Prints one line a host when pyinfra has disconnected from the last one."""

    def __init__(self, state, on_unreachable: Callable | None = None):
        self.on_unreachable = on_unreachable
        self.reasons: dict[str, str] = {}
        self.planned: dict[str, tuple[str, ...]] = {}
        self.disconnected: set[str] = set()
        self.finished = False
        self.errors = _FirstErrors(state)
        logger.addHandler(self.errors)

    def host_disconnect(self, state, host) -> None:
        if host.executing_op_hash is not None:
            return  # an operation's own disconnect (a reboot waits for the host): no end
        self.disconnected.add(host.name)
        if self.finished or not {h.name for h in state.activated_hosts} <= self.disconnected:
            return
        self.finished = True
        logger.removeHandler(self.errors)
        try:
            lines = summary_lines(self.outcomes(state))
        except Exception as error:  # the run's own result stands; say why there is no summary
            logger.warning(f"no summary of the run: {error}")
            return
        if lines:
            logger.info("--> Summary, one line a host:")
            for line in lines:
                logger.info(line)

    def outcomes(self, state) -> list[HostOutcome]:
        dry = dry_run()
        executed = state.current_stage >= StateStage.Execute
        unreachable = [
            h for h in state.inventory if h in state.failed_hosts and h not in state.activated_hosts
        ]
        outcomes = [
            HostOutcome(h.name, "unreachable", reason=unreachable_reason(error))
            for h, error in zip(unreachable, self._connect_errors(unreachable), strict=True)
        ]
        for h in state.activated_hosts:
            if executed:
                outcomes.append(self._executed(state, h))
            elif dry and h.name in self.planned:
                operations = self.planned[h.name]
                status = "would-change" if operations else "no-change"
                outcomes.append(HostOutcome(h.name, status, operations=operations))
        # A run stopped before it executed anything (refused, declined) says so itself.
        return outcomes if (executed or dry) else []

    def _connect_errors(self, hosts) -> list[str]:
        """Why each host could not be connected to. pyinfra logs that before any deploy file
        runs and keeps no record of it, so each is asked once more, in parallel."""
        tries = [gevent.spawn(_connect_error, h) for h in hosts]
        gevent.joinall(tries)
        errors = [attempt.value or "could not connect" for attempt in tries]
        for h, error in zip(hosts, errors, strict=True):
            if self.on_unreachable is not None:
                try:
                    self.on_unreachable(h, one_line(error))
                except Exception as problem:
                    logger.error(f"[{h.name}] unreachable, and no report of it: {problem}")
        return errors

    def _executed(self, state, host) -> HostOutcome:
        metas = [
            (op_hash, state.ops[host][op_hash].operation_meta)
            for op_hash in host.op_hash_order
            if op_hash in state.ops[host]
        ]
        if host not in state.failed_hosts:
            changed = sum(m.is_complete() and m.did_change() for _, m in metas)
            return HostOutcome(host.name, "changed" if changed else "ok", changed=changed)
        failed = [(op_hash, m) for op_hash, m in metas if m.is_complete() and not m.did_succeed()]
        detail = self.reasons.get(host.name)
        if failed:
            op_hash, meta = failed[0]
            output = [line for line in meta.stderr_lines or meta.stdout_lines if line.strip()]
            detail = detail or (output[-1] if output else self.errors.first.get(host.name))
            name = ", ".join(sorted(state.op_meta[op_hash].names))
            detail = f"{name}: {detail or 'failed'}"
        reason = one_line(detail or self.errors.first.get(host.name) or "failed", _secrets(host))
        return HostOutcome(host.name, "failed", reason=reason)


def _connect_error(host) -> str:
    try:
        host.connect(show_errors=False, raise_exceptions=True)
    except ConnectError as error:
        return str(error.args[0] if error.args else error)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    # Reachable now, but not when the run began: nothing ran on it.
    host.disconnect()
    return "could not connect when the run began (it answers now: run again)"


def _secrets(host) -> list[str]:
    """The host's secret values, masked wherever a reason repeats one."""
    try:
        secrets = read_secrets(host_config(host), host.name)
    except Exception:  # unreadable or invalid: nothing to mask beyond what looks like one
        return []
    return [secrets.api_key, secrets.hf_token, secrets.router_api_key]


def real(thing):
    """The object behind one of pyinfra's context proxies (``from pyinfra import host``):
    pyinfra's own sets and dicts of hosts hold the objects, and a proxy kept in one breaks
    once the context moves on."""
    return thing._get_module() if isinstance(thing, ContextObject) else thing


def run_summary(state, on_unreachable: Callable | None = None) -> RunSummary:
    """The run's summary handler, registered on the first call (a deploy file is loaded once
    a host). ``on_unreachable(host, error)``: also called for each host pyinfra could not
    connect to (the audit writes its report)."""
    for handler in state.callback_handlers:
        if isinstance(handler, RunSummary):
            return handler
    handler = RunSummary(state, on_unreachable)
    state.add_callback_handler(handler)
    return handler


def note_failure(host, reason: str) -> None:
    """Why ``host`` failed, as our code knows it (a check's message): the summary's reason."""
    for handler in host.state.callback_handlers:
        if isinstance(handler, RunSummary):
            handler.reasons.setdefault(host.name, reason)


def note_plan(state, host) -> None:
    """For a ``--dry`` run: the operations that would change ``host``, as pyinfra's change
    detection finds them (``OperationMeta.will_change``; with ``-y`` pyinfra skips that
    detection, so it is asked here). Call it after the host's last operation is planned.

    An operation with ``_if`` runs only when an earlier one changed: it is named when its
    condition is an operation's ``did_change`` and that operation would change, else left
    out (pyinfra's own table calls it a conditional change)."""
    if not dry_run():
        return
    state, host = real(state), real(host)
    changes: dict[str, str] = {}
    for op_hash in host.op_hash_order:
        op_data = state.ops[host].get(op_hash)
        if op_data is None or not op_data.operation_meta.will_change:
            continue
        conditions = op_data.global_arguments.get("_if")
        if conditions and not _triggered(conditions, changes):
            continue
        changes[op_hash] = ", ".join(sorted(state.op_meta[op_hash].names))
    run_summary(state).planned[host.name] = tuple(changes.values())


def _triggered(conditions, changes: dict[str, str]) -> bool:
    conditions = conditions if isinstance(conditions, list) else [conditions]
    metas = [getattr(condition, "__self__", None) for condition in conditions]
    return all(isinstance(m, OperationMeta) and m._hash in changes for m in metas)
