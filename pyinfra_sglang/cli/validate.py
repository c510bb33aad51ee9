"""`pyinfra-sglang validate`: an inventory's host and group data validated without connecting."""

from __future__ import annotations

import argparse
import sys

from pyinfra_sglang.cli.arguments import (
    key_value,
)
from pyinfra_sglang.cli.inventory_input import Refused, invalid, load_inventory
from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", help="inventory file, as given to pyinfra")
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="override data, as pyinfra's --data",
    )
    add_json(
        parser,
        '{"inventory", "hosts": [names], "fit": {host: {"model", "fits", "tp_size", "gpus", '
        '"gpu_memory_gb", "budget_gib", "weights_gib", "kv_floor_gib", "overhead_gib", '
        '"need_gib", "free_gib", "kv_tokens", "context_length", "full_context_requests", ...} '
        'or null}}; invalid: {"error", "problems": [{"host", "field", "value", "source", '
        '"message", "allowed"}]}',
    )


def run(args: argparse.Namespace) -> int:
    from pyinfra_sglang import inventory

    try:
        loaded = load_inventory("validate", args.inventory, args.data)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    try:
        configs = inventory.validate_inventory(loaded)
    except inventory.InventoryError as error:
        return invalid(args, error)
    fits = {name: planned_fit(config, loaded.get_host(name)) for name, config in configs.items()}
    if args.json:
        fit = {name: report.as_dict() if report else None for name, report in fits.items()}
        print_json({"inventory": args.inventory, "hosts": list(configs), "fit": fit})
        return 0
    for name, report in fits.items():
        print(f"{name}: ok")
        print(f"  fit: {report.line() if report else NO_SIZE}")
    return 0


# A profile with a plain floor (min_total_gpu_memory_gb) in place of its model's size.
NO_SIZE = "not reported: the profile gives a plain GPU-memory floor, not its model's size"


def planned_fit(config, host):
    """The fit of the host's planned placement (the GPUs the inventory plans for)."""
    from pyinfra_sglang.inventory.groups import node_position_in
    from pyinfra_sglang.serving.fit_report import fit_report
    from pyinfra_sglang.serving.service_files import planned_placement

    placement = planned_placement(config, node_position_in(config, host))
    return fit_report(placement.profile, placement.tp_size, placement.gpus.memory_gb)
