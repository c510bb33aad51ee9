"""Reboot a host and wait until it is back.

pyinfra's own server.reboot confirms the reboot by a smaller /proc/uptime, which a container
never shows (it reads the outer kernel's). A marker in /run, a tmpfs that every boot starts
empty, confirms it on machines, VMs and containers alike.
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationError

from roles.waiting import wait_until

REBOOT_MARKER = "/run/pyinfra-sglang-reboot-pending"


def _wait_for_reboot(state, host, timeout: float, interval: float) -> bool:
    def back() -> bool:
        host.connect(show_errors=False)
        if not host.connected:
            return False
        still_up, _ = host.run_shell_command(
            StringCommand("test", "-e", QuoteString(REBOOT_MARKER))
        )
        if not still_up:  # the marker is gone: this is a new boot
            return True
        host.disconnect()
        return False

    host.disconnect()
    if wait_until(back, timeout, interval, sleep_first=True):
        logger.info(f"{host.print_prefix}back after reboot")
        return True
    # An OperationError, not TimeoutError: pyinfra takes the latter for a command's own
    # timeout and reports "Command timed out after Nones".
    raise OperationError(
        f"{host.name} did not come back from its reboot within {timeout:.0f} s "
        "(reboot_timeout_s); check its console, then run the deploy again"
    )


@operation(is_idempotent=False)
def reboot_and_wait(timeout: int = 1800, interval: float = 2):
    """Reboot now and wait until the host is back: until a marker in `/run` is gone (works
    in VMs and containers, where `/proc/uptime` is the outer kernel's). Run it alone:
    `uv run pyinfra INVENTORY roles.reboot.reboot_and_wait`.

    + timeout: seconds the host has to come back; past them the operation fails
    + interval: seconds between tries to reconnect
    """
    # Detached, so the SSH channel closes before the host goes down.
    yield StringCommand(
        "touch",
        QuoteString(REBOOT_MARKER),
        "&& ( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &",
    )
    yield FunctionCommand(_wait_for_reboot, (), {"timeout": timeout, "interval": interval})
