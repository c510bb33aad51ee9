"""`pyinfra-sglang inventory-reference`: the inventory fields as Markdown tables, one per
field group, or a doc's reference block updated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--write", metavar="FILE", help="update the reference block in this file instead"
    )
    add_json(parser, '{"fields": [{"name", "default", "allowed", "description"}]}')


def run(args: argparse.Namespace) -> int:
    from pyinfra_sglang import inventory
    from pyinfra_sglang.config.reference import reference_markdown, with_reference

    if args.write:
        path = Path(args.write)
        try:
            path.write_text(with_reference(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            print(f"inventory-reference: cannot update {path}: {error}", file=sys.stderr)
            return 2
        if args.json:
            print_json({"written": str(path)})
        return 0
    if args.json:
        from pydantic_core import to_jsonable_python

        fields = [
            {
                "name": name,
                "default": to_jsonable_python(
                    info.get_default(call_default_factory=True), fallback=str
                ),
                "allowed": inventory.field_allowed(name),
                "description": info.description,
            }
            for name, info in inventory.HostConfig.model_fields.items()
        ]
        print_json({"fields": fields})
        return 0
    sys.stdout.write(reference_markdown())
    return 0
