"""Shared fixtures: real Debian test hosts booted with systemd-nspawn."""

from __future__ import annotations

import pytest

from tests.hosts.testhosts import TestHostPool, why_unavailable


@pytest.fixture(scope="session")
def host_pool(tmp_path_factory):
    """Boots test hosts on demand; stops exactly those it started at the end of the run."""
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    pool = TestHostPool(tmp_path_factory.mktemp("test-hosts"))
    yield pool
    pool.stop_all()
