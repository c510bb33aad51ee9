"""A flash-attn build that fails, as a test stand-in: it "compiles" kernels, logging each to
stderr, until nvcc is killed (as the OOM killer does when MAX_JOBS is too high for the RAM).
Metadata builds fine; only the wheel build fails, as with the real package.
"""

import re
import sys
from pathlib import Path

try:
    import torch  # noqa: F401  the real build imports it first, too
except ImportError as error:
    sys.exit(f"flash-attn (test stand-in): the build needs torch and cannot import it ({error})")

from setuptools import setup
from setuptools.command.build_py import build_py

KERNELS = 30
PKG_INFO = Path(__file__).resolve().with_name("PKG-INFO").read_text()


def pkg_info(field: str) -> list[str]:
    return re.findall(rf"^{field}: (.*)$", PKG_INFO, re.MULTILINE)


class BuildPy(build_py):
    def run(self) -> None:
        for number in range(1, KERNELS + 1):
            print(
                f"compiling kernel {number} of {KERNELS} (test stand-in)",
                file=sys.stderr,
                flush=True,
            )
        sys.exit("error: nvcc died with signal 9 (test double)")


setup(
    name=pkg_info("Name")[0],
    version=pkg_info("Version")[0],
    install_requires=pkg_info("Requires-Dist"),
    packages=["flash_attn"],
    cmdclass={"build_py": BuildPy},
)
