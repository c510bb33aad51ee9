"""One polling loop for the roles' waits on a host: a service's health, a model download, a
reboot."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

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
