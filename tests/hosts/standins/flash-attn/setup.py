"""flash-attn's build, as a test stand-in: no CUDA is compiled.

Like the real setup.py it imports torch, so it builds only without build isolation, in an
environment that already has torch. It records the environment it was built in as
flash_attn/build_env.json. Name, version and requirements come from the sdist's PKG-INFO.
"""

import json
import os
import re
import sys
from pathlib import Path

try:
    import torch
except ImportError as error:
    sys.exit(
        f"flash-attn (test stand-in): the build needs torch and cannot import it ({error}). "
        "Install torch first and build with --no-build-isolation."
    )

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_ENV = (
    "MAX_JOBS",
    "NVCC_THREADS",
    "FLASH_ATTN_CUDA_ARCHS",
    "FLASH_ATTENTION_FORCE_BUILD",
    "CUDA_HOME",
)
PKG_INFO = Path(__file__).resolve().with_name("PKG-INFO").read_text()


def pkg_info(field: str) -> list[str]:
    return re.findall(rf"^{field}: (.*)$", PKG_INFO, re.MULTILINE)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        record = {name: os.environ.get(name) for name in BUILD_ENV}
        record["torch_version"] = torch.__version__
        target = Path(self.build_lib, "flash_attn", "build_env.json")
        target.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


setup(
    name=pkg_info("Name")[0],
    version=pkg_info("Version")[0],
    install_requires=pkg_info("Requires-Dist"),
    packages=["flash_attn"],
    cmdclass={"build_py": BuildPy},
)
