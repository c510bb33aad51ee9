"""How long `pyinfra-sglang` takes to answer `--help`, `--version` and a subcommand's
`--help`, and what importing every subcommand's module costs (what each call loaded before
the CLI imported lazily). Median of --repeat runs, each a fresh process.

    uv run python bench/cli_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CASES = {
    "pyinfra-sglang --help": ["-m", "pyinfra_sglang.cli", "--help"],
    "pyinfra-sglang --version": ["-m", "pyinfra_sglang.cli", "--version"],
    "pyinfra-sglang build-plan --help": ["-m", "pyinfra_sglang.cli", "build-plan", "--help"],
    "pyinfra-sglang diagnose --help": ["-m", "pyinfra_sglang.cli", "diagnose", "--help"],
    "import every subcommand's module (the CLI before)": [
        "-c",
        "import pyinfra_sglang.inventory, pyinfra_sglang.audit.analyze, "
        "pyinfra_sglang.diagnosis.diagnose, pyinfra_sglang.report.page, "
        "pyinfra_sglang.diagnosis.ab_compare",
    ],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    for name, argv in CASES.items():
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], capture_output=True, check=True)
            times.append(time.perf_counter() - start)
        print(f"{name}: median {statistics.median(times):.3f} s (min {min(times):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
