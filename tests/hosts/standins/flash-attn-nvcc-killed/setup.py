"""A flash-attn build that fails, as a test stand-in: it "compiles" kernels, logging each to
stderr, until nvcc is killed (as the OOM killer does when MAX_JOBS is too high for the RAM).
Metadata builds fine; only the wheel build fails, as with the real package.

Its two kinds of output line are the stand-in's own wording, not the real build's:
"compiling kernel N of 30 (test stand-in)" and "error: nvcc died with signal 9 (test double)".
tests/integration/test_pyindex_on_host.py (NVCC_DIED, the last two lines) and
tests/integration/test_site_python.py (the role's failure message and the kept log) read them
as they are, so they stay. What the real build prints instead, for comparison:

- a compile step is ninja's "[N/M] <nvcc command>" (73 steps for flash-attn 2.8.3, 72 .cu
  files and flash_api.cpp in setup.py's CUDAExtension sources, Dao-AILab/flash-attention tag
  v2.8.3; a real "[2/73] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile ..."
  line is in https://github.com/Dao-AILab/flash-attention/issues/2064);
- nvcc killed by the OOM killer prints "nvcc error   : 'cicc' died due to signal 9 (Kill
  signal)" (compiling onnxruntime's copy of flash-attention's
  flash_fwd_split_hdim192_fp16_sm80.cu: https://github.com/microsoft/onnxruntime/issues/18579;
  the same text in https://github.com/NVIDIA/cudf/issues/8018); a flash-attn build killed for
  RAM shows "Killed" (https://github.com/Dao-AILab/flash-attention/issues/347, fixed with
  MAX_JOBS=4);
- a failed ninja step ends torch's build with "RuntimeError: Error compiling objects for
  extension" (https://github.com/Dao-AILab/flash-attention/issues/1346).

No real capture of a whole killed flash-attn build under uv was found; the kernel count (30)
and the order of the lines are the stand-in's.
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
