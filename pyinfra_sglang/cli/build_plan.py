"""`pyinfra-sglang build-plan`: the flash-attn build plan for a host size, touching no host."""

from __future__ import annotations

import argparse
import shlex
import sys

from pyinfra_sglang.cli.arguments import (
    MAX_CORES,
    at_most,
    cuda_archs,
    fraction,
    gigabytes,
)
from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cores",
        type=at_most(MAX_CORES, "cores"),
        required=True,
        help=f"CPU cores of the build host (1 to {MAX_CORES})",
    )
    parser.add_argument(
        "--mem-gb", type=gigabytes, required=True, help="available memory, GB (above 0)"
    )
    parser.add_argument(
        "--archs",
        type=cuda_archs,
        help="CUDA architectures, e.g. 90 or 90,120 (default: 90)",
    )
    parser.add_argument(
        "--memory-fraction",
        type=fraction,
        default=None,
        help="share of available memory the build may use, above 0 and at most 1 (default "
        "from data/python.toml)",
    )
    add_json(
        parser,
        '{"env": {VARIABLE: value}, "max_jobs", "nvcc_threads", "archs", "cores", '
        '"available_gb", "memory_fraction", "bound_gb", "estimated_peak_gb"}',
    )


def run(args: argparse.Namespace) -> int:
    from pyinfra_sglang.python_env.flash_attn_build_plan import (
        BuildPlanError,
        plan_flash_attn_build,
    )

    archs = args.archs or ["90"]
    try:
        plan = plan_flash_attn_build(args.cores, args.mem_gb, archs, args.memory_fraction)
    except BuildPlanError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    if args.json:
        print_json(
            {
                "env": plan.env(),
                "max_jobs": plan.max_jobs,
                "nvcc_threads": plan.nvcc_threads,
                "archs": list(plan.archs),
                "cores": plan.cores,
                "available_gb": plan.available_gb,
                "memory_fraction": plan.memory_fraction,
                "bound_gb": plan.bound_gb,
                "estimated_peak_gb": plan.estimated_peak_gb,
            }
        )
        return 0
    # Quoted for a shell: FLASH_ATTN_CUDA_ARCHS=90;120 unquoted would end at the ";".
    print(" ".join(f"{key}={shlex.quote(value)}" for key, value in plan.env().items()))
    print(
        f"estimated peak {plan.estimated_peak_gb:.0f} GB of a {plan.bound_gb:.0f} GB bound "
        f"({plan.memory_fraction:.0%} of {plan.available_gb:g} GB available), {plan.cores} cores"
    )
    return 0
