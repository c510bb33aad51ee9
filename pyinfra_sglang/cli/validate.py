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
        '{"inventory", "hosts": [names]}; invalid: {"error", "problems": [{"host", "field", '
        '"value", "source", "message", "allowed"}]}',
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
    if args.json:
        print_json({"inventory": args.inventory, "hosts": list(configs)})
        return 0
    for name in configs:
        print(f"{name}: ok")
    return 0
