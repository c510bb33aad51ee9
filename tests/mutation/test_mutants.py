"""A small mutation check: five rules that guard users, each removed or inverted in a copy
of the checkout, must make the tests that claim to guard them fail.

A test that still passes with its rule gone guards nothing. Each mutant is one exact text
replacement (the original must occur exactly once, so a refactor that moves the rule fails
here loudly instead of mutating nothing); the copy's targeted tests then run in a fresh
pytest with the copy first on the import path. The unmutated copy passes the same targets,
so a failure is the mutation's. About 30 s on CI's 2-core machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    original: str
    mutated: str
    targets: tuple[str, ...]  # pytest arguments: the tests that must catch it


MUTANTS = (
    Mutant(
        "decode: unreadable text is no longer degenerate",
        "pyinfra_sglang/host_programs/decode_client.py",
        "    if bad * 3 > len(visible):\n",
        "    if False:\n",
        ("tests/unit/test_decode_check.py", "-k", "degenerate"),
    ),
    Mutant(
        "ECC judge: volatile uncorrectable errors no longer fail",
        "pyinfra_sglang/audit/health.py",
        "        if volatile:\n",
        "        if False:\n",
        ("tests/unit/test_gpu_health.py",),
    ),
    Mutant(
        "key masking: known secret values are left in the text",
        "pyinfra_sglang/redact.py",
        "        text = text.replace(value, mask)\n",
        "        pass\n",
        ("tests/unit/test_redact.py",),
    ),
    Mutant(
        "cache folder: a system tree is accepted",
        "pyinfra_sglang/model_files/cache_dir.py",
        "    if trees:\n",
        "    if False:\n",
        ("tests/unit/test_cache_dir.py",),
    ),
    Mutant(
        "idempotence helper: a host missing from the results passes",
        "tests/hosts/apply.py",
        "            if name not in reached\n",
        "            if False\n",
        ("tests/unit/test_apply_result.py",),
    ),
)


def tracked_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    return [name for name in listed.stdout.decode().split("\0") if name]


@pytest.fixture(scope="module")
def files() -> list[str]:
    try:
        return tracked_files()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.fail(f"the mutation check copies git's file list: {error}", pytrace=False)


def copy_checkout(files: list[str], root: Path) -> Path:
    for name in files:
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    return root


def run_targets(root: Path, targets: tuple[str, ...]) -> subprocess.CompletedProcess:
    # The copy first on the import path: its pyinfra_sglang, checks and tests, not the
    # checkout's (which the virtualenv's editable install points at).
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("CI", None)  # the copy's own skips are not this run's
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header", *targets],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_the_unmutated_copy_passes_every_target(files, tmp_path):
    root = copy_checkout(files, tmp_path / "copy")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pyinfra_sglang, tests.hosts.apply as a\n"
            "print(pyinfra_sglang.__file__, a.__file__)",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    assert all(path.startswith(str(root)) for path in probe.stdout.split()), probe
    for mutant in MUTANTS:
        done = run_targets(root, mutant.targets)
        assert done.returncode == 0, f"{mutant.targets} fail unmutated:\n{done.stdout[-3000:]}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_removing_the_rule_fails_its_tests(files, tmp_path, mutant):
    root = copy_checkout(files, tmp_path / "copy")
    target = root / mutant.path
    text = target.read_text()
    assert text.count(mutant.original) == 1, (
        f"{mutant.path} holds {mutant.original!r} {text.count(mutant.original)} times: the rule "
        "moved; point the mutant at it again"
    )
    target.write_text(text.replace(mutant.original, mutant.mutated))
    done = run_targets(root, mutant.targets)
    # 1: tests ran and some failed. Not 2-5 (interrupted, internal error, usage, none ran):
    # a mutant that breaks collection proves nothing about the tests.
    assert done.returncode == 1, (
        f"with {mutant.name!r}, {' '.join(mutant.targets)} exited {done.returncode}, "
        f"not failing tests:\n{done.stdout[-3000:]}"
    )
    assert "failed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
