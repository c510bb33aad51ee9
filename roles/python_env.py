"""The Python side: uv at a pinned version (installed with pip from the inventory's index:
no curl-pipe-shell), a virtualenv with a pinned Python, and SGLang at its pin with torch
from the PyTorch index that matches the CUDA release."""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.hiddenvalue import HiddenValue

from checks.facts import PythonPackages, PythonVersion
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config
from roles.common import ensure_packages


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def url_arg(url: str) -> str | HiddenValue:
    """An index URL for a command line, hidden from pyinfra's output when it carries
    credentials (https://user:token@mirror/simple)."""
    parts = urlsplit(url)
    return HiddenValue(url) if parts.username or parts.password else url


def uv_path() -> str:
    return f"{data.load('python')['uv']['prefix']}/bin/uv"


def torch_index_url(config: HostConfig) -> str:
    if config.torch_index_url:
        return str(config.torch_index_url)
    torch = data.load("python")["torch"]
    return f"{torch['index_base']}/{torch['cuda_tag'][config.cuda_version]}"


def missing_requirements(
    installed: dict[str, str], requirements: dict[str, str | None]
) -> list[str]:
    """Requirement strings for what is absent or at another version than pinned."""
    needed = []
    for name, version in requirements.items():
        have = installed.get(normalize(name))
        if have is None or (version is not None and have != version):
            needed.append(f"{name}=={version}" if version else name)
    return needed


@operation()
def uv_installed(version: str, index_url: str):
    """uv ``version`` in its own small venv, installed by pip from ``index_url``."""
    prefix = data.load("python")["uv"]["prefix"]
    found = host.get_fact(PythonPackages, venv=prefix).get("uv")
    if found == version:
        host.noop(f"uv {version} is installed in {prefix}")
        return
    yield f"test -x {prefix}/bin/pip || python3 -m venv {prefix}"
    yield StringCommand(
        f"{prefix}/bin/pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--index-url",
        url_arg(index_url),
        f"uv=={version}",
    )


@operation()
def python_venv(path: str, python_version: str):
    """A virtualenv at ``path`` running Python ``python_version`` (recreated when it runs
    another one: its packages follow in the same deploy)."""
    found = host.get_fact(PythonVersion, path=f"{path}/bin/python")
    if found and found.startswith(f"{python_version}."):
        host.noop(f"{path} runs Python {found}")
        return
    yield f"{uv_path()} venv --clear --python {python_version} {shlex.quote(path)}"


@operation()
def venv_packages(
    venv: str,
    requirements: dict[str, str | None],
    index_url: str,
    extra_index_url: str | None = None,
):
    """Install what ``requirements`` ({name: pinned version, or None for any}) lacks, and
    nothing else: changing one pin changes exactly that package."""
    needed = missing_requirements(host.get_fact(PythonPackages, venv=venv), requirements)
    if not needed:
        host.noop(f"{venv} has {', '.join(requirements)}")
        return
    extra = ["--extra-index-url", url_arg(extra_index_url)] if extra_index_url else []
    yield StringCommand(
        uv_path(),
        "pip",
        "install",
        "--python",
        f"{venv}/bin/python",
        "--index-url",
        url_arg(index_url),
        *extra,
        *needed,
    )


@deploy("Python environment")
def python_env() -> None:
    config = host_config(host)
    index = str(config.pypi_index_url)
    ensure_packages("Install python3-venv (to bootstrap uv with pip)", ["python3-venv"])
    uv_installed(name=f"Install uv {config.uv_version}", version=config.uv_version, index_url=index)
    python_venv(
        name=f"Create the virtualenv (Python {config.python_version})",
        path=config.venv_path,
        python_version=config.python_version,
    )
    # uv looks in --extra-index-url before --index-url: torch comes from PyTorch's index.
    venv_packages(
        name=f"Install SGLang {config.sglang_version}",
        venv=config.venv_path,
        requirements={"sglang": config.sglang_version},
        index_url=index,
        extra_index_url=torch_index_url(config),
    )
