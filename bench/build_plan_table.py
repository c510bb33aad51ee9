"""The flash-attn build plan over a table of host sizes, beside flash-attn's own default.

flash-attn's setup.py, without MAX_JOBS, runs min(cores/2, available GB / 9) jobs of 4 nvcc
threads: at ~5 GB per thread that is ~20 GB a job against its 9 GB guess, with no margin.
Ours keeps jobs x threads x 5 GB under 75% of available memory.

    uv run python bench/build_plan_table.py [--archs 90]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra_sglang import data
from pyinfra_sglang.python_env.flash_attn_build_plan import (
    flash_attn_default_jobs,
    plan_flash_attn_build,
)

SIZES = [(2, 8), (16, 64), (32, 256), (64, 256), (128, 256), (128, 512), (128, 1024)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="90")
    args = parser.parse_args()
    per_thread = data.python().flash_attn.gb_per_nvcc_thread
    header = (
        f"{'cores':>5} {'mem GB':>6} | {'ours: jobs x thr':>16} {'peak GB':>7} {'% of mem':>8} | "
        f"{'flash-attn default: jobs x 4':>28} {'peak GB':>7} {'% of mem':>8}"
    )
    print(header)
    print("-" * len(header))
    for cores, mem in SIZES:
        plan = plan_flash_attn_build(cores, mem, args.archs.split(","))
        default_jobs = flash_attn_default_jobs(cores, mem)
        default_peak = default_jobs * 4 * per_thread
        print(
            f"{cores:>5} {mem:>6} | {plan.max_jobs:>9} x {plan.nvcc_threads:<4} "
            f"{plan.estimated_peak_gb:>7.0f} {plan.estimated_peak_gb / mem:>8.0%} | "
            f"{default_jobs:>23} x 4 {default_peak:>7.0f} {default_peak / mem:>8.0%}"
        )
    print(f"\nestimate: {per_thread:g} GB per nvcc thread; ours: bound = 75% of available memory")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
