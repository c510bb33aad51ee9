"""Fixtures of the integration tests: the site hosts, after the first apply of site.py."""

from __future__ import annotations

import pytest

from tests.hosts.testhosts import TestHostPool, why_unavailable

# The stand-in SGLang server writes a record of itself to /run/sglang-standin (tests read it
# there), which the service's sandbox (ProtectSystem=strict) leaves read-only: on the test
# hosts only, a drop-in opens that one folder to the service, as an operator's local override
# would. The folder comes back at every boot (tmpfiles.d); it does not exist on real hosts and
# is no file of the tool's, so the tool's digests and the audit never see it.
STANDIN_RECORD_DIR = "/run/sglang-standin"
STANDIN_DROP_IN = f"""\
# Test hosts only (tests/integration/conftest.py): the stand-in server's record folder.
[Service]
ReadWritePaths=-{STANDIN_RECORD_DIR}
"""
STANDIN_TMPFILES = f"d {STANDIN_RECORD_DIR} 0777 root root -\n"


# Cloud GPU images and DGX OS list NVIDIA's repository already, with another keyring: the
# first site host carries such an entry in one-line format, the second in deb822, so the
# first apply must disable them before apt can update (roles/nvidia_repo.py).
LEGACY_KEYRING = "/usr/share/keyrings/nvidia-cuda-legacy.gpg"
PREEXISTING_SOURCES = (
    (
        "/etc/apt/sources.list.d/nvidia-cuda.list",
        "deb [signed-by=" + LEGACY_KEYRING + "] {repo} /\n",
    ),
    (
        "/etc/apt/sources.list.d/cuda.sources",
        "Types: deb\nURIs: {repo}\nSuites: /\nSigned-By: " + LEGACY_KEYRING + "\n",
    ),
)


@pytest.fixture(scope="module")
def private_pool(tmp_path_factory):
    """Test hosts of the module's own, each in its own network namespace on a private
    network (the multi-node firewall and preflight modules, the metrics firewall's)."""
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    pool = TestHostPool(tmp_path_factory.mktemp("private-hosts"), private_network=True)
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session")
def site_hosts(site_hosts, host_pool, nvidia_mirror):
    """The site hosts (tests/conftest.py), with the stand-in's record folder writable from
    the sandboxed service, and NVIDIA's repository listed already with another keyring."""
    key = nvidia_mirror.public_key.read_bytes()
    for test_host, (path, text) in zip(site_hosts, PREEXISTING_SOURCES, strict=True):
        (test_host.root / LEGACY_KEYRING.lstrip("/")).write_bytes(key)
        (test_host.root / path.lstrip("/")).write_text(text.format(repo=nvidia_mirror.repo_url()))
    for test_host in site_hosts:
        open_standin_record(host_pool, test_host)
    return site_hosts


def open_standin_record(host_pool, test_host) -> None:
    """The stand-in server's record folder, writable from the sandboxed service."""
    host_pool.run(
        test_host,
        "set -e\nmkdir -p /etc/systemd/system/sglang.service.d\n"
        "cat > /etc/systemd/system/sglang.service.d/50-test-standin-record.conf <<'EOF'\n"
        f"{STANDIN_DROP_IN}EOF\n"
        "cat > /etc/tmpfiles.d/sglang-standin.conf <<'EOF'\n"
        f"{STANDIN_TMPFILES}EOF\n"
        "systemd-tmpfiles --create /etc/tmpfiles.d/sglang-standin.conf",
    )


@pytest.fixture
def hosts(site_hosts):
    return site_hosts


@pytest.fixture
def inventory(site_inventory, site_first_apply):
    """The site inventory, once deploy/site.py has been applied to its hosts."""
    assert site_first_apply.returncode == 0, site_first_apply.describe()
    return site_inventory
