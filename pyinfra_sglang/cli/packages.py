"""`pyinfra-sglang packages`: the NVIDIA driver's apt plan for a platform, touching no host."""

from __future__ import annotations

import argparse
import sys

from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang import data
    from pyinfra_sglang.driver.driver_plan import platform_names

    nvidia = data.nvidia()
    parser.add_argument("--platform", choices=platform_names(), required=True)
    parser.add_argument("--install", choices=("compute", "full"), default="compute")
    parser.add_argument("--modules", choices=("open", "proprietary"), default="open")
    parser.add_argument(
        "--branch",
        type=int,
        choices=nvidia.driver_branches,
        default=nvidia.default_driver_branch,
    )
    add_json(
        parser,
        '{"platform", "family", "branch", "pin", "packages": [[candidates]], '
        '"module_packages", "headers", "mirror_extra"}',
    )


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pyinfra_sglang.driver.driver_plan import driver_apt_plan, format_plan

    plan = driver_apt_plan(args.platform, args.install, args.modules, args.branch)
    if args.json:
        print_json(asdict(plan))
        return 0
    sys.stdout.write(format_plan(plan))
    return 0
