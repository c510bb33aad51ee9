"""``sglang.bench_serving``: the serving benchmark (see sglang._standin.bench). From 0.5.15 on,
SGLang's module is sglang.benchmark.serving and this old path is a shim that warns, then runs
(real 0.5.17's sglang/bench_serving.py: a FutureWarning at import, then ``cli_main()``)."""

import sys
import warnings

from sglang._standin.bench import main, run_benchmark  # noqa: F401 (the module's API)
from sglang._standin.releases import BENCH_MOVED, at_least
from sglang.version import __version__

if at_least(__version__, BENCH_MOVED):
    warnings.warn(
        "`sglang.bench_serving` is deprecated and will be removed in a future release; use "
        "`sglang.benchmark.serving` instead (e.g. `python -m sglang.benchmark.serving`).",
        FutureWarning,
        stacklevel=1,
    )

if __name__ == "__main__":
    sys.exit(main("python -m sglang.bench_serving"))
