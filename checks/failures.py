"""How a check-only operation fails its host: a callback that logs why and changes nothing."""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand

from checks.run_summary import note_failure, real


def _log_failures(state, host, what: str, messages: list[str]) -> bool:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so; False
    # marks the operation failed, so the pyinfra run exits non-zero.
    for message in messages:
        logger.error(f"{host.print_prefix}{what} failed: {message}")
    note_failure(host, f"{what} failed: {'; '.join(messages)}")
    return False


def fail_host(what: str, messages: list[str]) -> FunctionCommand:
    """The command a check-only operation yields to fail its host: it logs "<what> failed:
    <message>" for each message and changes nothing."""
    return FunctionCommand(_log_failures, (what, messages), {})


def fail_run(state, host, what: str, messages: list[str]) -> None:
    """A check that found a host failing, called while the run executes: logs "<what> failed:
    <message>" and makes the run exit non-zero, the host's operation itself succeeding.

    pyinfra's CLI exits 1 when ``state.failed_hosts`` holds any host. Failing the operation
    instead would end a run whose every host fails the check (one ``@local`` host, say) with
    pyinfra's "Error: executed 0 commands" and "No hosts remaining!", no results table and no
    summary: a check that found something is no crash. Only for a host's last operation:
    pyinfra would run later ones on it."""
    for message in messages:
        logger.error(f"{host.print_prefix}{what} failed: {message}")
    note_failure(host, f"{what} failed: {'; '.join(messages)}")
    real(state).failed_hosts.add(real(host))
