"""Cached virtualenvs with a real SGLang release, just enough of it to import
``sglang.srt.server_args`` on a machine without a GPU.

Layout, under ``cache_dir()/sglang-compat/`` (``~/.cache/pyinfra-sglang`` or
``$PYINFRA_SGLANG_TEST_CACHE``):

    torch-<torch version>/   one shared venv: torch, torchvision and triton (~5.5 GB)
    <sglang version>/        one venv per release: ``sglang==V`` without its dependencies,
                             plus the pure-Python and small packages its ``server_args``
                             imports at module import time (~350-550 MB); a ``.pth`` file
                             puts the shared torch venv's site-packages on its path.

Why this torch: ``sglang/srt/utils/common.py`` imports torch, triton and (0.5.14 .. 0.5.18)
``torchvision.io`` at import time, and 0.5.9's import chain reaches torchvision through
its multimodal processors. PyPI's torchvision is a CUDA build whose ``_C.so`` needs
``libtorch_cuda.so``: beside the machine's CPU torch 2.13.0 it fails with "operator
torchvision::nms does not exist", and CPU builds of torchvision live only on
download.pytorch.org, which is out of reach. So the shared venv has PyPI's CUDA torch 2.14.1
and torchvision 0.29.1 (a CUDA build imports fine without a GPU; pip on this machine takes
both from the local wheel mirror, uv would download ~3 GB), and triton from torch's own
requirement. Every version shares it, whatever torch that SGLang release pins: only the
argument parser is used, never a kernel.

Every venv is made with ``python -m venv`` and filled with its own pip (the machine's pip,
which reads the machine's pip configuration, local wheel mirrors included). A venv is used
only when its ``compat-env.json`` names the recipe it was built from; anything else is
removed and built again, under a file lock, so parallel runs wait for one build.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tests.hosts.testhosts import cache_dir

# The shared GPU stack. torchvision must be the release built for this torch.
TORCH_STACK = ("torch==2.14.1", "torchvision==0.29.1")
# Pinned into every SGLang venv so no package there pulls a second torch next to the shared one.
SHARED_DISTRIBUTIONS = ("torch", "torchvision", "triton")

# Distributions whose modules ``import sglang.srt.server_args`` (and SGLang's
# ConfigArgumentMerger, which needs yaml) imports at module import time, in 0.5.5 .. 0.5.23:
# found by importing it in a venv with ``pip install --no-deps sglang==V`` and adding the
# package of each ModuleNotFoundError until the import went through (0.5.5 .. 0.5.8 import
# fastapi, later releases only starlette). Each is installed at the
# version that release of SGLang pins in its metadata (transformers==4.57.1 for 0.5.9 and
# 5.19.0 for 0.5.23, for example: SGLang registers model configs with transformers at import
# time, and a newer transformers already has some of them), else the newest.
IMPORT_TIME_DISTRIBUTIONS = (
    "aiohttp",
    "dill",
    "fastapi",
    "huggingface-hub",
    "ipython",
    "msgspec",
    "numpy",
    "openai",
    "orjson",
    "packaging",
    "partial-json-parser",
    "pillow",
    "psutil",
    "pybase64",
    "pydantic",
    "pyyaml",
    "pyzmq",
    "requests",
    "safetensors",
    "sentencepiece",
    "starlette",
    "tokenizers",
    "tqdm",
    "transformers",
    "xgrammar",
)

READY = "compat-env.json"
PIP_TIMEOUT_S = 1800
RECIPE_VERSION = 1  # bump to rebuild every cached venv


PYPI_SIMPLE = "https://pypi.org/simple"


class EnvUnavailable(Exception):
    """pip could not build the venv here: ``what`` names the install that failed."""

    def __init__(self, message: str, what: str = ""):
        super().__init__(message)
        self.what = what


def pip_index_url() -> str:
    """The index pip installs from on this machine: $PIP_INDEX_URL, pip's configured
    index-url, else PyPI's (local find-links and extra indexes come on top of it)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.split(".")[-1] == "index-url":
            return value.strip().strip("'\"")
    return PYPI_SIMPLE


def index_unreachable(url: str) -> str | None:
    """Why the index at ``url`` does not answer, or None when it does."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/pip/", timeout=15):
            return None
    except OSError as error:
        return str(error)


def env_failed(error: EnvUnavailable) -> NoReturn:
    """A venv that could not be built fails the test, naming the install, unless the index
    itself is out of reach here: that is said as the reason for a skip."""
    url = pip_index_url()
    why = index_unreachable(url)
    if why:
        pytest.skip(f"the package index {url} cannot be reached ({why}), so: {error}")
    pytest.fail(
        f"{error.what or 'building a compat venv'} failed, the index answering: {error}",
        pytrace=False,
    )


@dataclass(frozen=True)
class SglangEnv:
    version: str
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


def compat_dir() -> Path:
    return cache_dir() / "sglang-compat"


def _site_packages(venv: Path) -> Path:
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / tag / "site-packages"


def _run(command: list[str], log: Path, what: str) -> None:
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        done = subprocess.run(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=PIP_TIMEOUT_S,
            cwd="/",
        )
    if done.returncode != 0:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "Error" in line] or lines
        raise EnvUnavailable(f"{what} failed (log: {log}): {' | '.join(errors[-3:])}", what)


def _pip(venv: Path, args: list[str], log: Path, what: str) -> None:
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "--disable-pip-version-check",
            "install",
            *args,
        ],
        log,
        what,
    )


def _ready(venv: Path, recipe: dict) -> bool:
    try:
        return json.loads((venv / READY).read_text())["recipe"] == recipe
    except (OSError, ValueError, KeyError):
        return False


def _build_once(venv: Path, recipe: dict, build) -> None:
    """``build(venv, log)`` into a fresh ``venv`` unless it is ready for ``recipe``."""
    if _ready(venv, recipe):
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building it right now
        if _ready(venv, recipe):
            return
        shutil.rmtree(venv, ignore_errors=True)
        started = time.monotonic()
        # sys.executable may be a venv's python; venv builds on the interpreter under it.
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        log = venv / "build.log"
        build(venv, log)
        built = {"recipe": recipe, "build_seconds": round(time.monotonic() - started, 1)}
        (venv / READY).write_text(json.dumps(built, indent=2) + "\n")


def torch_env() -> Path:
    """The shared venv with torch, torchvision and triton."""
    name = TORCH_STACK[0].replace("==", "-")
    venv = compat_dir() / name
    recipe = {"recipe_version": RECIPE_VERSION, "packages": list(TORCH_STACK)}

    def build(venv: Path, log: Path) -> None:
        _pip(venv, list(TORCH_STACK), log, f"pip install {' '.join(TORCH_STACK)}")

    _build_once(venv, recipe, build)
    return venv


def _shared_pins(torch_venv: Path) -> list[str]:
    """``name==version`` of the shared distributions, as installed in the torch venv."""
    pins = []
    for dist_info in _site_packages(torch_venv).glob("*.dist-info"):
        name, _, version = dist_info.name.removesuffix(".dist-info").partition("-")
        if canonicalize_name(name) in SHARED_DISTRIBUTIONS:
            pins.append(f"{canonicalize_name(name)}=={version}")
    return sorted(pins)


def _sglang_pins(venv: Path, version: str) -> list[str]:
    """IMPORT_TIME_DISTRIBUTIONS as requirements, at the versions SGLang ``version`` pins."""
    metadata = _site_packages(venv) / f"sglang-{version}.dist-info" / "METADATA"
    pinned: dict[str, str] = {}
    for line in metadata.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in IMPORT_TIME_DISTRIBUTIONS and requirement.specifier:
            pinned[name] = f"{name}{requirement.specifier}"
    return [pinned.get(name, name) for name in IMPORT_TIME_DISTRIBUTIONS]


def sglang_env(version: str) -> SglangEnv:
    """The cached venv of SGLang ``version`` (built on first use; EnvUnavailable if pip
    cannot build it here)."""
    torch_venv = torch_env()
    venv = compat_dir() / version
    recipe = {
        "recipe_version": RECIPE_VERSION,
        "sglang": version,
        "torch_venv": str(torch_venv),
        "shared": list(TORCH_STACK),
        "import_time": list(IMPORT_TIME_DISTRIBUTIONS),
    }

    def build(venv: Path, log: Path) -> None:
        site = _site_packages(venv)
        # The shared torch venv's packages come after this venv's own on sys.path.
        (site / "_sglang_compat_torch.pth").write_text(f"{_site_packages(torch_venv)}\n")
        constraints = venv / "shared-constraints.txt"
        constraints.write_text("".join(f"{pin}\n" for pin in _shared_pins(torch_venv)))
        what = f"pip install --no-deps sglang=={version}"
        _pip(venv, ["--no-deps", f"sglang=={version}"], log, what)
        wanted = _sglang_pins(venv, version)
        _pip(venv, ["-c", str(constraints), *wanted], log, f"pip install {' '.join(wanted)}")

    _build_once(venv, recipe, build)
    return SglangEnv(version, venv)
