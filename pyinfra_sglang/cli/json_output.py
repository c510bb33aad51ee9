"""--json: one strict JSON document on stdout, errors too; what every command's --json shares."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from contextlib import redirect_stderr, redirect_stdout


def add_json(parser: argparse.ArgumentParser, shape: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f'print one JSON document instead: {shape}; an error as {{"error", "command", '
        '"status"}, with the same exit status',
    )


def strict_json(value: object) -> str:
    """``value`` as strict JSON (RFC 8259): a number that is not finite becomes null."""

    def finite(item: object) -> object:
        if isinstance(item, float) and not math.isfinite(item):
            return None
        if isinstance(item, dict):
            return {key: finite(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [finite(inner) for inner in item]
        return item

    return json.dumps(finite(value), indent=2, allow_nan=False) + "\n"


def print_json(value: object) -> None:
    sys.stdout.write(strict_json(value))


def run_as_json(args: argparse.Namespace) -> int:
    """Run a command in --json mode: what it prints to stdout, as strict JSON (NaN and
    Infinity, which some writers let through, become null); when it prints no JSON and
    fails, its message becomes {"error", "command", "status"}. Same exit status."""
    printed, said = io.StringIO(), io.StringIO()
    with redirect_stdout(printed), redirect_stderr(said):
        status = args.func(args)
    text = printed.getvalue()
    try:
        value = json.loads(text, parse_constant=lambda _: None) if text.strip() else None
    except ValueError:
        value = None
    if value is None:
        message = said.getvalue().strip() or text.strip() or "no output"
        value = {"error": message, "command": args.command, "status": status or 1}
        status = status or 1  # a command that printed no JSON did not do its job
    else:
        sys.stderr.write(said.getvalue())
    print_json(value)
    return status


def json_wanted(argv: list[str]) -> bool:
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
