"""Shared fixtures: real Debian test hosts booted with systemd-nspawn."""

from __future__ import annotations

import shutil

import pytest

from tests.hosts import aptrepo
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


@pytest.fixture(scope="session")
def nvidia_mirror(tmp_path_factory):
    """A signed stand-in for NVIDIA's CUDA apt repository (debian12/x86_64), served on
    127.0.0.1 for the whole run; yields an aptrepo.Mirror (.url, .root, .public_key)."""
    missing = [tool for tool in ("dpkg-deb", "gpg") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"the test CUDA apt repository needs {', '.join(missing)} (apt-get install dpkg gpg)")
    built = aptrepo.build_repo(tmp_path_factory.mktemp("nvidia-mirror"))
    with aptrepo.serve(built.root) as url:
        yield aptrepo.Mirror(url=url, root=built.root, public_key=built.public_key)
