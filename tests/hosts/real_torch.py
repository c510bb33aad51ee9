"""A real PyTorch for test hosts, where a test needs torch.distributed itself (the multi-node
all-reduce preflight): PyPI's CPU build of 2.13.0 for CPython 3.11, Debian 12's Python. This
machine keeps its wheel in /opt/wheels; elsewhere PyTorch's CPU index has it. Installed once
into a cache folder with uv, then copied into a venv made by the host's own Python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.hosts.testhosts import cache_dir

VERSION = "2.13.0+cpu"
WHEELS = Path("/opt/wheels")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_site() -> Path:
    """A site-packages folder holding torch and what it requires (built on first use)."""
    site = cache_dir() / f"torch-{VERSION}-cp311-site"
    if (site / "torch/__init__.py").exists():
        return site
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    source = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else ["--extra-index-url", CPU_INDEX]
    subprocess.run(
        [
            *("uv", "pip", "install", "--quiet", "--target", str(partial)),
            *("--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"),
            *source,
            f"torch=={VERSION}",
        ],
        check=True,
    )
    partial.rename(site)
    return site


def install_venv(root: Path, venv: str) -> None:
    """A venv at ``venv`` on the test host whose root folder is ``root``, made by its own
    Python 3.11, with the real torch in it."""
    subprocess.run(
        ["chroot", str(root), "python3", "-m", "venv", "--without-pip", venv], check=True
    )
    target = root / venv.lstrip("/") / "lib/python3.11/site-packages"
    subprocess.run(["cp", "-a", f"{torch_site()}/.", str(target)], check=True)
