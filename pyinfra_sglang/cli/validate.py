"""`pyinfra-sglang validate`: an inventory's host and group data validated without connecting."""

from __future__ import annotations

import argparse
import sys

from pyinfra_sglang.cli.arguments import (
    add_data,
)
from pyinfra_sglang.cli.inventory_input import Refused, invalid, load_inventory
from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", help="inventory file, as given to pyinfra")
    add_data(parser)
    add_json(
        parser,
        '{"inventory", "hosts": [names], "fit": {host: {"model", "fits", "tp_size", "gpus", '
        '"gpu_memory_gb", "budget_gib", "weights_gib", "kv_floor_gib", "overhead_gib", '
        '"need_gib", "free_gib", "kv_tokens", "context_length", "full_context_requests", ...} '
        'or null}, "fit_not_judged": {host: why} (where any)}; invalid: {"error", "problems": '
        '[{"host", "field", "value", "source", "message", "allowed"}]}',
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
        fit = {
            name: report.as_dict() if not isinstance(report, str) else None
            for name, report in fits.items()
        }
        unjudged = {name: why for name, why in fits.items() if isinstance(why, str)}
        document = {"inventory": args.inventory, "hosts": list(configs), "fit": fit}
        print_json({**document, "fit_not_judged": unjudged} if unjudged else document)
        return 0
    for name, report in fits.items():
        print(f"{name}: ok")
        print(f"  fit: {report if isinstance(report, str) else report.line()}")
    return 0


# Why a host's fit is not judged: only what the inventory plans is (never a GPU it guessed).
NO_SIZE = "not judged: the profile gives a plain GPU-memory floor, not its model's size"
NO_GPU = (
    "not judged: the inventory names no expected_gpu_model (validation plans on an assumed "
    "GPU; the deploy judges the fit on the GPUs it finds)"
)


def planned_fit(config, host):
    """The fit of the host's planned placement on the GPU the inventory plans for; a text
    saying why it is not judged where no GPU or no model size is planned."""
    from pyinfra_sglang.inventory.groups import node_position_in
    from pyinfra_sglang.serving.fit_report import fit_report
    from pyinfra_sglang.serving.service_files import planned_placement

    if config.expected_gpu_model is None:
        return NO_GPU
    placement = planned_placement(config, node_position_in(config, host))
    report = fit_report(placement.profile, placement.tp_size, placement.gpus.memory_gb)
    return report or NO_SIZE
