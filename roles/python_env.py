"""The Python side: uv at a pinned version (installed with pip from the inventory's index:
no curl-pipe-shell), a virtualenv with a pinned Python, and SGLang at its pin, after torch's
CUDA build from the PyTorch index that matches the CUDA release
(pyinfra_sglang/python_env/python_stack.py says why the order, and why each command sees one
index)."""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from secrets import token_hex
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, deploy, operation

from checks.facts import PythonPackages, PythonVersion, read_once, read_together
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config
from pyinfra_sglang.python_env.python_stack import InstallPlan, install_plan, version_matches
from roles.common import ensure_packages

# Index URLs with credentials wait here for the one command that reads them: root's alone
# (0700), on a tmpfs, each file removed by the command as soon as it has read it.
CREDENTIALS_DIR = "/run/pyinfra-sglang"
STAGING_PREFIX = "/tmp/pyinfra-sglang-index."
# Connector arguments that run a command as the SSH user, whatever elevation the host uses.
AS_THE_SSH_USER = {"_sudo": False, "_doas": False, "_dzdo": False, "_su_user": None}
# The variables a tool reads its index and extra index from, as it reads --index-url and
# --extra-index-url (uv 0.13 still reads these, beside its newer UV_DEFAULT_INDEX/UV_INDEX).
INDEX_VARIABLES = {
    "uv": ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL"),
    "pip": ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"),
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def has_credentials(url: str) -> bool:
    """Does ``url`` carry credentials (https://user:token@mirror/simple)?"""
    parts = urlsplit(url)
    return bool(parts.username or parts.password)


class SecretText(io.StringIO):
    """Content uploaded to a host that never shows in pyinfra's output (nor in a repr)."""

    def __repr__(self) -> str:
        return "<secret>"


@dataclass(frozen=True)
class IndexOptions:
    """How one command gets its package indexes. A URL without credentials is an option on
    its command line. One with credentials never is (``ps`` shows every process's argv, and
    pyinfra runs commands as ``sh -c '...'``): it is uploaded to a 0600 file first
    (``uploads``), and ``prefix`` has the shell read it into an exported variable the tool
    reads (``VAR="$(cat FILE)"``: the expansion happens inside the shell) and remove it."""

    uploads: tuple
    prefix: str
    args: tuple

    def command(self, *bits) -> StringCommand:
        """``bits`` (a command taking these indexes) after the prefix."""
        return StringCommand(self.prefix, *bits) if self.prefix else StringCommand(*bits)


def index_options(tool: str, index_url: str, extra_index_url: str | None = None) -> IndexOptions:
    """The indexes for ``tool`` ("uv" or "pip"); see IndexOptions."""
    uploads: list = []
    prefix: list[str] = []
    args: list = []
    urls = (
        ("--index-url", "index-url", index_url),
        ("--extra-index-url", "extra-index-url", extra_index_url),
    )
    for (option, file_name, url), variable in zip(urls, INDEX_VARIABLES[tool], strict=True):
        if not url:
            continue
        if not has_credentials(url):
            args += [option, QuoteString(url)]
            continue
        path = shlex.quote(f"{CREDENTIALS_DIR}/{file_name}")
        if not uploads:
            uploads.append(
                StringCommand("install", "-d", "-m", "700", QuoteString(CREDENTIALS_DIR))
            )
        # Under _sudo (or doas, su) pyinfra uploads through a temporary file of the SSH
        # user's, at a predictable /tmp path with the SFTP server's mode (0644): give it one
        # made 0600 beforehand, as the SSH user, at a name nobody can guess; removed after.
        staging = f"{STAGING_PREFIX}{token_hex(16)}"
        uploads += [
            StringCommand("install", "-m", "600", "/dev/null", staging, **AS_THE_SSH_USER),
            FileUploadCommand(
                SecretText(url), f"{CREDENTIALS_DIR}/{file_name}", remote_temp_filename=staging
            ),
            StringCommand("rm", "-f", staging, **AS_THE_SSH_USER),
            StringCommand("chmod", "600", path),
        ]
        prefix.append(f'{variable}="$(cat {path})" && rm -f {path} && export {variable} &&')
    return IndexOptions(tuple(uploads), " ".join(prefix), tuple(args))


def uv_prefix() -> str:
    """The venv uv is installed in (with pip)."""
    return data.python().uv.prefix


def uv_path() -> str:
    return f"{uv_prefix()}/bin/uv"


def sglang_install_plan(config: HostConfig) -> InstallPlan:
    """The ordered installs of the host's SGLang release for its CUDA release."""
    return install_plan(
        config.sglang_version,
        config.cuda_version,
        str(config.pypi_index_url),
        str(config.torch_index_url) if config.torch_index_url else None,
        str(config.sglang_kernel_index_url) if config.sglang_kernel_index_url else None,
    )


def missing_requirements(
    installed: dict[str, str], requirements: dict[str, str | None]
) -> list[str]:
    """Requirement strings for what is absent or at another version than pinned (a pin
    without a local label takes any build of its release: ``2.14.1`` is ``2.14.1+cu130``)."""
    needed = []
    for name, version in requirements.items():
        have = installed.get(normalize(name))
        if have is None or (version is not None and not version_matches(have, version)):
            needed.append(f"{name}=={version}" if version else name)
    return needed


@operation()
def uv_installed(version: str, index_url: str):
    """uv ``version`` in its own small venv, installed by pip from ``index_url``."""
    prefix = uv_prefix()
    found = read_once(host, PythonPackages, venv=prefix).get("uv")
    if found == version:
        host.noop(f"uv {version} is installed in {prefix}")
        return
    quoted = shlex.quote(prefix)
    yield StringCommand(f"test -x {quoted}/bin/pip || python3 -m venv {quoted}")
    indexes = index_options("pip", index_url)
    yield from indexes.uploads
    yield indexes.command(
        QuoteString(f"{prefix}/bin/pip"),
        "install",
        "--quiet",
        "--disable-pip-version-check",
        *indexes.args,
        QuoteString(f"uv=={version}"),
    )


@operation()
def python_venv(path: str, python_version: str):
    """A virtualenv at ``path`` running Python ``python_version`` (recreated when it runs
    another one: its packages follow in the same deploy)."""
    found = read_once(host, PythonVersion, path=f"{path}/bin/python")
    if found and found.startswith(f"{python_version}."):
        host.noop(f"{path} runs Python {found}")
        return
    yield StringCommand(
        QuoteString(uv_path()),
        "venv",
        "--clear",
        "--python",
        QuoteString(python_version),
        QuoteString(path),
    )


def uv_pip_install(
    venv: str, requirements: list[str], indexes: IndexOptions, *options: str
) -> Iterator:
    """The commands that install ``requirements`` into ``venv`` with uv: the index
    credentials' uploads, then ``uv pip install``."""
    yield from indexes.uploads
    yield indexes.command(
        QuoteString(uv_path()),
        "pip",
        "install",
        "--python",
        QuoteString(f"{venv}/bin/python"),
        *options,
        *indexes.args,
        *(QuoteString(requirement) for requirement in requirements),
    )


@operation()
def venv_packages(
    venv: str,
    requirements: dict[str, str | None],
    index_url: str,
    extra_index_url: str | None = None,
):
    """Install what ``requirements`` ({name: pinned version, or None for any}) lacks, and
    nothing else: changing one pin changes exactly that package."""
    needed = missing_requirements(read_once(host, PythonPackages, venv=venv), requirements)
    if not needed:
        host.noop(f"{venv} has {', '.join(requirements)}")
        return
    yield from uv_pip_install(venv, needed, index_options("uv", index_url, extra_index_url))


@operation()
def sglang_installed(venv: str, plan: InstallPlan):
    """Install ``plan``'s steps into ``venv`` in order, from the first step whose pins the
    venv lacks on: a step without dependencies leaves them to the last step, SGLang's, which
    resolves them from PyPI while keeping what the earlier steps installed."""
    installed = read_once(host, PythonPackages, venv=venv)
    due = [bool(missing_requirements(installed, step.requirements)) for step in plan.steps]
    if not any(due):
        pins = ", ".join(
            f"{name} {installed[normalize(name)]}"
            for step in plan.steps
            for name in step.requirements
        )
        host.noop(f"{venv} has {pins}")
        return
    for step in plan.steps[due.index(True) :]:
        requirements = [f"{name}=={version}" for name, version in step.requirements.items()]
        options = ("--no-deps",) if step.no_deps else ()
        yield from uv_pip_install(venv, requirements, index_options("uv", step.index_url), *options)


@deploy("Python environment")
def python_env() -> None:
    """Install uv and a virtualenv with torch and SGLang at the release's pins.

    One venv per SGLang, Python and CUDA release, built beside the one the server runs from.
    torch comes from PyTorch's index alone, SGLang from `pypi_index_url` alone: no command sees
    two indexes. A changed pin reinstalls from its step on.

    + sglang_version: the SGLang release, and the torch it pins
    + python_version: the venv's Python
    + cuda_version: the CUDA build of torch
    + uv_version: the uv release
    + venv_path: the venv (default: one per release)
    + pypi_index_url: index of uv and SGLang
    + torch_index_url: index of torch
    """
    config = host_config(host)
    index = str(config.pypi_index_url)
    # The venvs in one command: uv's packages, the server venv's Python and packages.
    read_together(
        host,
        (PythonPackages, {"venv": uv_prefix()}),
        (PythonVersion, {"path": f"{config.venv_path}/bin/python"}),
        (PythonPackages, {"venv": config.venv_path}),
    )
    ensure_packages("Install python3-venv (to bootstrap uv with pip)", ["python3-venv"])
    uv_installed(name=f"Install uv {config.uv_version}", version=config.uv_version, index_url=index)
    python_venv(
        name=f"Create the virtualenv (Python {config.python_version})",
        path=config.venv_path,
        python_version=config.python_version,
    )
    plan = sglang_install_plan(config)
    sglang_installed(
        name=f"Install SGLang {config.sglang_version}",
        venv=config.venv_path,
        plan=plan,
    )
