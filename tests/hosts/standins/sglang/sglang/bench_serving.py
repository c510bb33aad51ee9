"""``python -m sglang.bench_serving``: the serving benchmark (see sglang._standin.bench). From
0.5.18 on, SGLang's module is sglang.benchmark.serving and this old path warns, then runs."""

import sys

from sglang._standin.bench import main
from sglang._standin.releases import BENCH_MOVED, at_least
from sglang.version import __version__

if __name__ == "__main__":
    if at_least(__version__, BENCH_MOVED):
        print(
            "DeprecationWarning: sglang.bench_serving is deprecated, use "
            "`python -m sglang.benchmark.serving`",
            file=sys.stderr,
        )
    sys.exit(main("python -m sglang.bench_serving"))
