"""Shared fixtures: real Debian test hosts booted with systemd-nspawn."""

from __future__ import annotations

# pyinfra_cli monkey-patches the standard library for gevent when first imported. Import it
# before any fixture starts a thread (the mirror's HTTP server, the hosts' reboot watchers), so
# the whole test process runs in one consistent, patched world.
import pyinfra_cli  # noqa: F401  isort: skip

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.hosts import aptrepo, pyindex
from tests.hosts.apply import apply, write_inventory
from tests.hosts.site_model import (
    FETCH_ONCE_MODEL,
    RESUMABLE_MODEL,
    RESUMABLE_RATE,
    RESUMABLE_WEIGHTS,
    SITE_HF_TOKEN,
    SITE_MODEL,
    SITE_MODEL_COMMIT,
    model_files,
)
from tests.hosts.testhosts import TestHostPool, why_unavailable

# `pytest --shard K/N` (scripts/test.sh runs the shards side by side): tests/sharding.py.
from tests.sharding import (  # noqa: F401  pytest finds these hooks by name
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
)


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
        pytest.skip(
            f"the test CUDA apt repository needs {', '.join(missing)} (apt-get install dpkg gpg)"
        )
    # nvidia-smi replays the 2x H200 capture; tests switch a host to the 8-GPU one.
    built = aptrepo.build_repo(
        tmp_path_factory.mktemp("nvidia-mirror"),
        captures=(
            "h200x2-nvlink-vm",
            "rtxpro6000x8-pcie-from-smiq",
            "rtxpro6000x8-pcie-x8-of-x16",
            "h200x8-hgx-fabric-in-progress",
        ),
    )
    with aptrepo.serve(built.root) as url:
        yield aptrepo.Mirror(url=url, root=built.root, public_key=built.public_key)


@pytest.fixture(scope="session")
def site_hosts(host_pool):
    """Two Debian 12 test hosts that deploy/site.py is applied to."""
    return host_pool.boot(2)


@pytest.fixture(scope="session")
def site_secrets(tmp_path_factory):
    """The API key and HF token files on the controller (values tests look for in output)."""
    folder = tmp_path_factory.mktemp("secrets")
    for name, secret in (
        ("api-key", "sk-site-APIKEY-0123456789"),
        ("hf-token", SITE_HF_TOKEN),
    ):
        path = folder / name
        path.write_text(secret + "\n")
        path.chmod(0o600)  # as a user keeps them: validation warns when others can read them
    return folder


@pytest.fixture(scope="session")
def model_hub():
    """A stand-in for the Hugging Face Hub on 127.0.0.1 (tests/hosts/hubstandin.py): the site
    profile's model at a commit (also its main branch), a gated repository the site's token
    may not open, and a model served slowly (for a download killed mid-file); yields
    (endpoint, hub)."""
    from tests.hosts.hubstandin import LFS_THRESHOLD, Hub, Repo, serve

    repos = {
        SITE_MODEL: Repo(
            commits={SITE_MODEL_COMMIT: model_files(LFS_THRESHOLD + 1024 * 1024)},
            refs={"main": SITE_MODEL_COMMIT},
        ),
        # On the Hub, but the stand-in server fails to load it (its broken/ prefix): for the
        # rollback tests, which need a start that fails after the download.
        "broken/model": Repo(
            commits={SITE_MODEL_COMMIT: model_files(1024)}, refs={"main": SITE_MODEL_COMMIT}
        ),
        "test-org/gated-model": Repo(
            commits={SITE_MODEL_COMMIT: model_files(1024)},
            refs={"main": SITE_MODEL_COMMIT},
            gated_token="hf_other_account_TOKEN",
        ),
        FETCH_ONCE_MODEL: Repo(
            commits={SITE_MODEL_COMMIT: model_files(LFS_THRESHOLD + 1024 * 1024)},
            refs={"main": SITE_MODEL_COMMIT},
        ),
        RESUMABLE_MODEL: Repo(
            commits={SITE_MODEL_COMMIT: model_files(RESUMABLE_WEIGHTS)},
            refs={"main": SITE_MODEL_COMMIT},
            throttle_bytes_per_s=RESUMABLE_RATE,
        ),
    }
    hub = Hub(repos, tokens=(SITE_HF_TOKEN,))
    with serve(hub) as endpoint:
        yield endpoint, hub


@pytest.fixture(scope="session")
def site_data(host_pool, nvidia_mirror, python_index, site_secrets, model_hub) -> dict:
    """The inventory data of a site host: NVIDIA's repository and the package indexes
    replaced by local stand-ins; Python 3.11 is Debian 12's own, so uv downloads no
    interpreter."""
    return {
        **host_pool.inventory_data(),
        "nvidia_apt_mirror": nvidia_mirror.url,
        # The stand-in mirror is plain http on loopback: its keyring's sha256 is pinned.
        "nvidia_keyring_sha256": hashlib.sha256(
            (nvidia_mirror.root / "debian12/x86_64/cuda-keyring_1.1-1_all.deb").read_bytes()
        ).hexdigest(),
        "pypi_index_url": python_index.pypi_url,
        "torch_index_url": python_index.torch_url,
        "python_version": "3.11",
        # The site tests build flash-attn (the stand-in's build records what it saw): asked
        # for, since the dense profile on these GPUs does not need it.
        "flash_attn_build": True,
        "sglang_model_profile": "dense-bf16",
        "sglang_api_key_file": str(site_secrets / "api-key"),
        "hf_token_file": str(site_secrets / "hf-token"),
        # The model comes from the Hub stand-in, at a pinned commit.
        "hf_endpoint": model_hub[0],
        "sglang_model_revision": SITE_MODEL_COMMIT,
        # A site host's "kernel" keeps the module it booted with (no LOAD_ON_INSTALL): a
        # rollout's validation could never pass there, so its driver moves go in place.
        # The rollout itself, on hosts whose installs count as loaded and with the default
        # budget: tests/integration/test_driver_rollout_on_hosts.py.
        "driver_rollout_max_unavailable": "off",
    }


@pytest.fixture(scope="session")
def site_inventory(tmp_path_factory, site_hosts, site_data):
    """An inventory of the site hosts. The hosts share this machine's network: each serves
    SGLang on its own 127.0.0.x address."""
    return write_inventory(
        tmp_path_factory.mktemp("inventory") / "gpu_hosts.py",
        {"gpu_hosts": [(h.address, {**site_data, "sglang_host": h.address}) for h in site_hosts]},
    )


@pytest.fixture(scope="session")
def site_first_apply(site_inventory):
    """The first apply of deploy/site.py to the site hosts (-v: noop reasons printed)."""
    return apply(site_inventory, options=("-v",))


@pytest.fixture(scope="session")
def python_index(tmp_path_factory):
    """Stand-ins for PyPI and PyTorch's index (real uv and build-tool wheels, test sglang,
    torch and flash-attn), served on 127.0.0.1 for the whole run; yields a pyindex.Index
    (.pypi_url, .torch_url, .url, .root)."""
    built = pyindex.build_index(tmp_path_factory.mktemp("python-index"))
    with aptrepo.serve(built.root) as url:
        yield pyindex.Index(url=url, root=built.root)


# On CI (.ci/run sets CI), a skipped test is a failure of the run: after scripts/bootstrap-tests.sh
# no skip condition may hold there (tests/unit/test_skip_conditions.py lists each one), so a
# skip means a broken set-up, which must not leave CI green.
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI") and _SKIPPED:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"CI: {len(_SKIPPED)} test(s) skipped, which fails the run:")
            for line in _SKIPPED:
                reporter.write_line(f"  {line}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A CI shard (2026-12-06) ran out of file descriptors at its end (EMFILE at its limit of
# 20,000, every test passed): removing its host roots with shutil.rmtree, each directory's
# descriptor stayed open, gevent's patched os.close deferring it (tests/hosts/testhosts.py
# remove_tree). Each module that leaves more than 20 more open is written to
# results/tests/fds-<pid>.txt, so a new leak shows in the run where it happens.
_FDS = {"count": 0}
_FD_LOG = Path(__file__).resolve().parents[1] / "results" / "tests" / f"fds-{os.getpid()}.txt"


def pytest_runtest_teardown(item, nextitem):
    module = item.nodeid.split("::")[0]
    if nextitem is not None and nextitem.nodeid.split("::")[0] == module:
        return
    count = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    grown = count - _FDS["count"]
    _FDS["count"] = count
    if grown > 20:
        _FD_LOG.parent.mkdir(parents=True, exist_ok=True)
        with _FD_LOG.open("a") as log:
            log.write(f"{module}: {count - grown} -> {count} open descriptors\n")
