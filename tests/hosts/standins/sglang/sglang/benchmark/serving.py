"""``python -m sglang.benchmark.serving``: the serving benchmark (see sglang._standin.bench),
present from 0.5.18 on; older releases have only sglang.bench_serving, so here the module
fails as a missing one does."""

import sys

from sglang._standin.bench import main
from sglang._standin.releases import BENCH_MOVED, at_least
from sglang.version import __version__

if __name__ == "__main__":
    if not at_least(__version__, BENCH_MOVED):
        print(f"{sys.executable}: No module named sglang.benchmark.serving", file=sys.stderr)
        sys.exit(1)
    sys.exit(main("python -m sglang.benchmark.serving"))
