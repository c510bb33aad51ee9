"""An inventory file as `validate` and `render --inventory` take it: loaded as pyinfra loads it,
with --data over it, and its problems printed (or as JSON)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyinfra_sglang.cli.json_output import print_json


class Refused(Exception):
    """A command cannot go on; ``status``: its exit status (the message is printed)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def load_inventory(command: str, path: str, data: list[tuple[str, str]]):
    """The pyinfra Inventory of the file ``path`` with ``--data`` over it; Refused (2) when
    it cannot be loaded or holds no hosts."""
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra_cli.util import parse_cli_arg

    from pyinfra_sglang import inventory

    # Parse --data exactly as the pyinfra CLI does, so both see the same values.
    override = {key: parse_cli_arg(value) for key, value in data}
    source = Path(path)
    # A path (pyinfra would take anything else for a host name and look it up in DNS).
    looks_like_a_file = "/" in path or path.endswith(".py")
    if source.is_dir() or (looks_like_a_file and not source.is_file()):
        what = "a folder" if source.is_dir() else "no such file"
        raise Refused(f"{command}: {path}: {what}, not an inventory file", 2)
    try:
        loaded = inventory.load_inventory_file(path, override_data=override)
    except Exception as error:  # the inventory is the user's Python: anything may go wrong
        why = str(error) if isinstance(error, PyinfraError) else f"{type(error).__name__}: {error}"
        raise Refused(f"{command}: cannot load the inventory {path}: {why}", 2) from None
    if not len(loaded):
        raise Refused(
            f"{command}: {path}: no hosts (not an inventory file, a host list or a module "
            "pyinfra can load)",
            2,
        )
    return loaded


def invalid(args: argparse.Namespace, error) -> int:
    """An InventoryError as the command prints it; exit status 1."""
    from dataclasses import asdict

    if args.json:
        problems = [asdict(problem) for problem in error.problems]
        print_json({"error": str(error).splitlines()[0], "problems": problems})
    else:
        print(error, file=sys.stderr)
    return 1
