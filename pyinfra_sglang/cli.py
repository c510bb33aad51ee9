"""The `pyinfra-sglang` command: offline tools that share code with the deploys."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyinfra_sglang import inventory


def _inventory_reference(args: argparse.Namespace) -> int:
    if args.write:
        path = Path(args.write)
        path.write_text(inventory.with_reference(path.read_text()))
        return 0
    sys.stdout.write(inventory.reference_markdown())
    return 0


def _validate(args: argparse.Namespace) -> int:
    from pyinfra_cli.util import parse_cli_arg

    # Parse --data exactly as the pyinfra CLI does, so both see the same values.
    override = {key: parse_cli_arg(value) for key, value in (i.split("=", 1) for i in args.data)}
    try:
        loaded = inventory.load_inventory_file(args.inventory, override_data=override)
        configs = inventory.validate_inventory(loaded)
    except inventory.InventoryError as error:
        print(error, file=sys.stderr)
        return 1
    for name in configs:
        print(f"{name}: ok")
    return 0


def _build_plan(args: argparse.Namespace) -> int:
    from pyinfra_sglang.build_plan import BuildPlanError, plan_flash_attn_build

    archs = [a for a in args.archs.replace(";", ",").split(",") if a] if args.archs else ["90"]
    try:
        plan = plan_flash_attn_build(args.cores, args.mem_gb, archs, args.memory_fraction)
    except BuildPlanError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    print(" ".join(f"{key}={value}" for key, value in plan.env().items()))
    print(
        f"estimated peak {plan.estimated_peak_gb:.0f} GB of a {plan.bound_gb:.0f} GB bound "
        f"({plan.memory_fraction:.0%} of {plan.available_gb:g} GB available), {plan.cores} cores"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyinfra-sglang", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    reference = commands.add_parser(
        "inventory-reference", help="print the inventory fields as a Markdown table"
    )
    reference.add_argument(
        "--write", metavar="README", help="update the reference block in this file instead"
    )
    reference.set_defaults(func=_inventory_reference)

    validate = commands.add_parser(
        "validate", help="validate an inventory's host and group data without connecting"
    )
    validate.add_argument("inventory", help="inventory file, as given to pyinfra")
    validate.add_argument(
        "--data", action="append", default=[], metavar="KEY=VALUE",
        help="override data, as pyinfra's --data",
    )  # fmt: skip
    validate.set_defaults(func=_validate)

    plan = commands.add_parser(
        "build-plan", help="print the flash-attn build plan for a host size, touching no host"
    )
    plan.add_argument("--cores", type=int, required=True, help="CPU cores of the build host")
    plan.add_argument("--mem-gb", type=float, required=True, help="available memory, GB")
    plan.add_argument(
        "--archs", help="CUDA architectures, e.g. 90 or 90,120 (default: 90)"
    )
    plan.add_argument(
        "--memory-fraction", type=float, default=None,
        help="share of available memory the build may use (default from data/python.toml)",
    )  # fmt: skip
    plan.set_defaults(func=_build_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
