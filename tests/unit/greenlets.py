"""Waiting for greenlets in unit tests that run in one process with many others."""

from __future__ import annotations

import time

import gevent


def join_all(greenlets: list, timeout: float = 30.0, raise_error: bool = False) -> list:
    """``gevent.joinall`` until every greenlet ended or ``timeout`` passed. An earlier test
    of the same process can leave a switch to the main greenlet pending in gevent's hub;
    joinall then returns at once (seen in CI: after 0.3 ms, a greenlet still asleep), so it
    is asked again until the deadline."""
    deadline = time.monotonic() + timeout
    while not all(greenlet.dead for greenlet in greenlets):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        gevent.joinall(greenlets, timeout=left, raise_error=raise_error)
    return greenlets
