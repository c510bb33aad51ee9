"""One polling loop for the roles' waits on a host: a service's health, a model download, a
reboot; and the check before a host waits on its site's seed (fetch or build once)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pyinfra.api.exceptions import OperationError

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    interval_s: float,
    *,
    sleep_first: bool = False,
) -> T | None:
    """Ask ``predicate`` every ``interval_s`` seconds until it answers (anything truthy, which
    is returned) or ``timeout_s`` has passed (None). ``sleep_first``: wait one interval
    before the first question (a reboot, a download just started). A question started
    before the deadline is still asked; the deadline is not an upper bound on the time.

    time.sleep is looked up at each call: under pyinfra's gevent patching it yields to the
    other hosts' greenlets, and tests may replace it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sleep_first:
            time.sleep(interval_s)
        answer = predicate()
        if answer:
            return answer
        if not sleep_first:
            time.sleep(interval_s)
    return None


def seed_in_run(state, host, seed: str, copies: str, field_name: str) -> None:
    """A host that takes what its site's ``seed`` makes (``copies``: what it takes) needs
    the seed in this run (roles/model_site.py, flash_attn_site.py); OperationError if not."""
    if seed not in {h.name for h in state.inventory.get_active_hosts()}:
        raise OperationError(
            f"{host.name} {copies} from its site's seed {seed} ({field_name}), which is not "
            f"in this run: run it with the seed, or unset {field_name} for this host"
        )
