"""Every place the suite can skip, with the condition that skips it and why that condition
cannot hold on CI after scripts/bootstrap-tests.sh (root, Debian, the apt packages it
installs,
PyPI reachable). A new skip fails test_every_skip_site_is_listed until it is listed here.

On CI (CI set, as .ci/run runs) a skip is a failure of the run itself (tests/conftest.py,
pytest_sessionfinish), and test_no_skip_condition_holds_on_ci evaluates each condition."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser.chromium import find_chromium
from tests.compat.sglang_env import index_unreachable, pip_index_url
from tests.hosts.testhosts import why_unavailable

TESTS = Path(__file__).resolve().parents[1]
# What skips a test: pytest's own calls and markers.
SKIP_CALL = re.compile(r"pytest\.skip\(|\.skipif\(|pytest\.importorskip\(")


def _missing(*tools: str) -> bool:
    return not all(shutil.which(tool) for tool in tools)


def _loads_libcuda() -> bool:
    from checks.facts import CudaInit
    from pyinfra_sglang.driver.fabric import parse_cuda_init

    out = subprocess.run(
        CudaInit().command(venv="/nonexistent"), shell=True, capture_output=True, text=True
    ).stdout
    return bool(parse_cuda_init(out.splitlines()).get("probed"))


def _not_a_git_checkout() -> bool:
    done = subprocess.run(["git", "ls-files"], cwd=TESTS, capture_output=True)
    return done.returncode != 0


def _no_own_group() -> bool:
    try:
        grp.getgrnam(pwd.getpwuid(os.getuid()).pw_name)
    except KeyError:
        return True
    return False


def _no_hub_client() -> bool:
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return True
    return False


@dataclass(frozen=True)
class Skip:
    file: str  # relative to tests/
    count: int  # skip calls or markers in that file
    condition: str
    holds: Callable[[], bool]
    why_not_on_ci: str


SKIPS = (
    Skip(
        "conftest.py",
        2,
        "test hosts cannot boot (not root, no systemd-nspawn, debootstrap, "
        "ssh-keygen); no dpkg-deb or gpg for the stand-in repository",
        lambda: why_unavailable() is not None or _missing("dpkg-deb", "gpg"),
        "CI runs as root; bootstrap installs systemd-container, debootstrap, openssh-client, gnupg",
    ),
    Skip(
        "browser/test_report_in_chromium.py",
        1,
        "Chromium missing and not installable",
        lambda: find_chromium() is None,
        "bootstrap installs chromium (a missing one that could be installed fails instead)",
    ),
    Skip(
        "integration/conftest.py",
        1,
        "test hosts cannot boot (private_pool)",
        lambda: why_unavailable() is not None,
        "as conftest.py",
    ),
    Skip(
        "unit/test_fabric.py",
        1,
        "this machine loads libcuda.so.1 (a GPU machine)",
        _loads_libcuda,
        "CI's machine has no GPU and no NVIDIA driver",
    ),
    Skip(
        "unit/test_sources_inside_repo.py",
        1,
        "not a git checkout",
        _not_a_git_checkout,
        "CI runs in a clone",
    ),
    Skip(
        "unit/test_analyze_inputs.py",
        1,
        "no /dev/zero",
        lambda: not os.path.exists("/dev/zero"),
        "Linux",
    ),
    Skip(
        "unit/test_sglang_unit_sandbox.py",
        1,
        "no systemd-analyze",
        lambda: _missing("systemd-analyze"),
        "bootstrap installs systemd-container (systemd)",
    ),
    Skip("unit/test_safe_writers.py", 1, "not root", lambda: os.geteuid() != 0, "CI is root"),
    Skip(
        "unit/test_aptrepo.py",
        1,
        "no dpkg-deb, gpg or gpgv",
        lambda: _missing("dpkg-deb", "gpg", "gpgv"),
        "Debian's dpkg; bootstrap installs gnupg",
    ),
    Skip(
        "unit/test_keyring_deb.py",
        1,
        "no dpkg-deb, gpg or tar",
        lambda: _missing("dpkg-deb", "gpg", "tar"),
        "Debian's dpkg and tar; gnupg",
    ),
    Skip(
        "unit/test_cache_dir.py",
        2,
        "no dpkg-query; not root",
        lambda: _missing("dpkg-query") or os.geteuid() != 0,
        "Debian; CI is root",
    ),
    Skip(
        "unit/test_monitoring.py",
        1,
        "no promtool",
        lambda: _missing("promtool"),
        "bootstrap installs prometheus (its promtool)",
    ),
    Skip(
        "unit/test_nvidia_operations.py",
        1,
        "no dpkg-deb or gpg",
        lambda: _missing("dpkg-deb", "gpg"),
        "Debian's dpkg; gnupg",
    ),
    Skip(
        "unit/test_sglang_service_secrets.py",
        2,
        "not root; the user has no group of its name",
        lambda: os.geteuid() != 0 or _no_own_group(),
        "CI is root, and root has group root",
    ),
    Skip(
        "unit/test_hub_standin.py",
        1,
        "huggingface_hub not importable",
        _no_hub_client,
        "a dev dependency in uv.lock",
    ),
    Skip(
        "compat/test_install_order.py",
        1,
        "PyPI unreachable",
        lambda: index_unreachable(pip_index_url()) is not None,
        "CI reaches PyPI",
    ),
    Skip(
        "compat/sglang_env.py",
        1,
        "a compat venv failed to build and the index is "
        "unreachable (a build failure with the index answering fails)",
        lambda: index_unreachable(pip_index_url()) is not None,
        "CI reaches PyPI",
    ),
    Skip(
        "build/check_wheel.py",
        1,
        "no uv to build the wheel",
        lambda: _missing("uv"),
        "bootstrap installs uv (scripts/build_checks.sh runs it in CI's lint stage)",
    ),
    Skip(
        "unit/test_skip_conditions.py",
        1,
        "this test off CI",
        lambda: False,
        "it runs on CI by definition",
    ),
)


def skip_sites() -> Counter:
    sites: Counter = Counter()
    for path in TESTS.rglob("*.py"):
        relative = path.relative_to(TESTS).as_posix()
        if relative.startswith(("fixtures/", "hosts/standins/")):
            continue
        text = path.read_text()
        if relative == "unit/test_skip_conditions.py":
            text = text.split("# --- the tests ---")[-1]  # this file's table names skips too
        found = len(SKIP_CALL.findall(text))
        if found:
            sites[relative] = found
    return sites


# --- the tests ---


def test_every_skip_site_is_listed():
    listed = Counter({skip.file: skip.count for skip in SKIPS})
    assert skip_sites() == listed, (
        "skip calls per file differ from SKIPS: list each new skip with its condition and "
        f"why it cannot hold on CI; found {dict(skip_sites())}"
    )


def test_no_skip_condition_holds_on_ci():
    holding = [f"{skip.file}: {skip.condition}" for skip in SKIPS if skip.holds()]
    if not os.environ.get("CI"):
        pytest.skip(f"not CI; conditions holding here: {holding or 'none'}")
    assert holding == [], f"on CI these skip conditions hold: {holding}"
