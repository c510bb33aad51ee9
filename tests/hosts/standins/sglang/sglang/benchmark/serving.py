"""``sglang.benchmark.serving``: the serving benchmark (see sglang._standin.bench), present from
0.5.15 on; older releases have only sglang.bench_serving, so here the module fails as a
missing one does, run (``python -m``) or imported."""

import sys

from sglang._standin.releases import BENCH_MOVED, at_least
from sglang.version import __version__

if not at_least(__version__, BENCH_MOVED):
    if __name__ == "__main__":
        print(f"{sys.executable}: No module named sglang.benchmark.serving", file=sys.stderr)
        sys.exit(1)
    raise ModuleNotFoundError("No module named 'sglang.benchmark.serving'")

from sglang._standin.bench import main, run_benchmark  # noqa: F401 (the module's API)

if __name__ == "__main__":
    sys.exit(main("python -m sglang.benchmark.serving"))
