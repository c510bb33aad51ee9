"""The Python role's SGLang install, resolved against the real PyPI.

For the default pins and for SGLang 0.5.17, the role's own operation (roles/python_env.py
``sglang_installed``, fed the role's own plan for the inventory) renders its commands; here
they run with this machine's uv into a scratch venv: the CUDA builds' steps (``--no-deps``)
for real, SGLang's step with ``--dry-run``. What that last step would install is what a host
gets: the test names it and asserts the sglang, kernel and flashinfer releases, and that
torch, torchvision and torchaudio stay the ones the first step installed (held).

PyTorch's index (download.pytorch.org) is used where it can be reached. Where it cannot (this
project's CI reaches PyPI only), the torch step runs against PyPI through the inventory's own
``torch_index_url``: PyPI's torch 2.11.0 and 2.14.1 are CUDA 13.0 builds as well (their
METADATA requires cuda-toolkit 13.0.x), the same release the cu130 index holds. A machine
that reaches neither skips, saying why. The torch wheels (~0.6 GB each) land in uv's cache;
a later run reads them from there. ``-m "not compat"`` leaves this out.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path
from unittest.mock import patch

import pytest

from checks.facts import PythonPackages
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig
from roles import python_env
from tests.compat.sglang_env import PYPI_SIMPLE
from tests.unit.ophelper import run_operation

pytestmark = pytest.mark.compat

PYPI = PYPI_SIMPLE
PYTORCH_CU130 = "https://download.pytorch.org/whl/cu130"
UV_TIMEOUT_S = 900
DEFAULT = HostConfig()

# What each release resolves to on PyPI (its wheel's METADATA pins these exactly).
EXPECTED = {
    DEFAULT.sglang_version: {
        "sglang": DEFAULT.sglang_version,
        "sglang-kernel": "0.4.10",
        "flashinfer-python": "0.7.2",
    },
    "0.5.17": {"sglang": "0.5.17", "sglang-kernel": "0.4.5", "flashinfer-python": "0.6.15.post1"},
}


def reachable(url: str) -> str | None:
    """None when ``url`` answers, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=15):
            return None
    except OSError as error:
        return f"{url}: {error}"


@pytest.fixture(scope="module")
def torch_index() -> str:
    why = reachable(f"{PYPI}/sglang/")
    if why:
        pytest.skip(f"PyPI cannot be reached here ({why})")
    return PYTORCH_CU130 if reachable(f"{PYTORCH_CU130}/torch/") is None else PYPI


def uv() -> str:
    found = subprocess.run(["uv", "--version"], capture_output=True, text=True, check=True)
    return found.stdout.split()[1]


def role_commands(config: HostConfig, venv: Path) -> list[str]:
    """The shell commands the role's operation yields for a venv with nothing installed."""
    plan = python_env.sglang_install_plan(config)
    with patch.object(python_env, "uv_path", return_value="uv"):
        commands, noops = run_operation(
            python_env.sglang_installed, {PythonPackages: {}}, venv=str(venv), plan=plan
        )
    assert not noops
    return commands


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=UV_TIMEOUT_S
    )


def would_install(output: str) -> dict[str, str]:
    """``uv pip install --dry-run``'s `` + name==version`` lines."""
    return dict(re.findall(r"^ \+ ([A-Za-z0-9._-]+)==(\S+)$", output, re.MULTILINE))


@pytest.mark.parametrize("sglang_version", sorted(EXPECTED))
def test_the_roles_install_resolves_on_the_real_pypi(sglang_version, torch_index, tmp_path):
    config = HostConfig(
        sglang_version=sglang_version,
        cuda_version="13.1",
        python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
        torch_index_url=None if torch_index == PYTORCH_CU130 else torch_index,
    )
    stack = python_env.sglang_install_plan(config).stack
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    *builds, sglang = role_commands(config, venv)
    assert len(builds) == 1 and f"--index-url {torch_index}" in builds[0], builds
    assert f"--index-url {PYPI}" in sglang and "--extra-index-url" not in sglang, sglang

    done = run(builds[0])
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [
            f"{venv}/bin/python",
            "-c",
            "import json, importlib.metadata as m; print(json.dumps("
            "{n: m.version(n) for n in ('torch', 'torchvision', 'torchaudio')}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    held = json.loads(listed.stdout)
    assert {name: v.split("+")[0] for name, v in held.items()} == {
        "torch": stack.torch,
        "torchvision": stack.torchvision,
        "torchaudio": stack.torchaudio,
    }

    dry = sglang.replace(" pip install ", " pip install --dry-run ", 1)
    resolved = run(dry)
    assert resolved.returncode == 0, resolved.stderr
    found = would_install(resolved.stderr + resolved.stdout)
    print(
        f"\nuv {uv()} (data/python.toml pins {data.python().uv.version}); torch step from "
        f"{torch_index}: {held}\nSGLang step would install {len(found)} packages: "
        + ", ".join(f"{name} {found[name]}" for name in sorted(found))
    )
    assert {name: found.get(name) for name in EXPECTED[sglang_version]} == (
        EXPECTED[sglang_version]
    )
    # torch's builds are held: the SGLang step installs none of them again.
    assert not {"torch", "torchvision", "torchaudio"} & set(found), found
    # ... and resolves their CUDA 13 dependencies from PyPI.
    assert any(name.startswith("nvidia-") and name.endswith("-cu13") for name in found), found
    assert shlex.split(sglang)[-2:] == [
        f"sglang=={sglang_version}",
        f"{stack.kernel}=={stack.kernel_version}",
    ]
