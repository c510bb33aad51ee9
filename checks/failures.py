"""How a check-only operation fails its host: a callback that logs why and changes nothing."""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand


def _log_failures(state, host, what: str, messages: list[str]) -> bool:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so; False
    # marks the operation failed, so the pyinfra run exits non-zero.
    for message in messages:
        logger.error(f"{host.print_prefix}{what} failed: {message}")
    return False


def fail_host(what: str, messages: list[str]) -> FunctionCommand:
    """The command a check-only operation yields to fail its host: it logs "<what> failed:
    <message>" for each message and changes nothing."""
    return FunctionCommand(_log_failures, (what, messages), {})
