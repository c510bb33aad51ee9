"""The `pyinfra-sglang` command: offline tools that share code with the deploys."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable
from contextlib import redirect_stderr
from dataclasses import dataclass

# Every import of the project's modules is inside the function that needs it: pyinfra,
# pydantic and matplotlib took ~3 s to load, for `--help` too (bench/cli_startup.py).
from pyinfra_sglang.cli import (
    build_plan,
    decode_check,
    inventory_reference,
    packages,
    plan,
    profile,
    render,
    report,
    validate,
)
from pyinfra_sglang.cli.json_output import json_wanted, print_json, run_as_json


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help, how it reads its arguments, and what it runs
    (returning the exit status). Only the subcommand being run has its arguments read."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _lazy(target: str) -> Callable:
    """``module:function``, imported when first called."""
    module, name = target.split(":")

    def call(*args):
        import importlib

        return getattr(importlib.import_module(module), name)(*args)

    return call


COMMANDS = (
    Command(
        "inventory-reference",
        "print the inventory fields as a Markdown table",
        inventory_reference.add_arguments,
        inventory_reference.run,
    ),
    Command(
        "validate",
        "validate an inventory's host and group data without connecting",
        validate.add_arguments,
        validate.run,
    ),
    Command(
        "build-plan",
        "print the flash-attn build plan for a host size, touching no host",
        build_plan.add_arguments,
        build_plan.run,
    ),
    Command(
        "plan",
        "print a model's fit on GPUs, layout by layout, from its own files",
        plan.add_arguments,
        plan.run,
    ),
    Command(
        "profile",
        "write a profile for a model from its own files (profile new MODEL)",
        profile.add_arguments,
        profile.run,
    ),
    Command(
        "render",
        "print the SGLang unit, env file and config file for a profile, touching no host",
        render.add_arguments,
        render.run,
    ),
    Command(
        "packages",
        "print the NVIDIA driver's apt plan for a platform, touching no host",
        packages.add_arguments,
        packages.run,
    ),
    Command(
        "decode-check",
        "ask a running SGLang server a question whose answer is known",
        decode_check.add_arguments,
        decode_check.run,
    ),
    Command(
        "analyze",
        "run the audit's parsers and checks on captured nvidia-smi outputs",
        _lazy("pyinfra_sglang.audit.analyze:add_arguments"),
        _lazy("pyinfra_sglang.audit.analyze:run"),
    ),
    Command(
        "diagnose",
        "name what limits a served model from a benchmark's results folder",
        _lazy("pyinfra_sglang.diagnosis.diagnose:add_arguments"),
        _lazy("pyinfra_sglang.diagnosis.diagnose:run"),
    ),
    Command(
        "ab-compare",
        "tell a throughput difference between two sets of benchmark runs from noise",
        _lazy("pyinfra_sglang.diagnosis.ab_compare:add_arguments"),
        _lazy("pyinfra_sglang.diagnosis.ab_compare:run"),
    ),
    Command(
        "report",
        "write an HTML page of a benchmark run's charts and findings (an A/B page of two)",
        report.add_arguments,
        report.run,
    ),
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyinfra-sglang")
    except PackageNotFoundError:  # run from a checkout without installing it
        return "unknown"


def build_parser(argv: list[str] | None = None, every: bool = False) -> argparse.ArgumentParser:
    """The parser; of the subcommands, only the one ``argv`` names gets its arguments (each
    may import what it needs), so `--help` and `--version` load nothing else; ``every``: all
    of them (for the generated docs/cli.md)."""
    parser = argparse.ArgumentParser(prog="pyinfra-sglang", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for command in COMMANDS:
        subparser = subcommands.add_parser(command.name, help=command.help)
        if every or command.name == chosen:
            command.add_arguments(subparser)
        subparser.set_defaults(func=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except Exception as error:
        # A broken data file of the checkout (a syntax error in data/gpus.toml): one line
        # naming the file, not a traceback.
        from pyinfra_sglang.data import DataError

        if not isinstance(error, DataError):
            raise
        print(f"pyinfra-sglang: {error}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    if not json_wanted(argv):
        args = parser.parse_args(argv)
        return args.func(args)
    # --json: a bad argument is a JSON error too (argparse prints usage to stderr, exits 2).
    said = io.StringIO()
    try:
        with redirect_stderr(said):
            args = parser.parse_args(argv)
    except SystemExit as exit_:
        sys.stderr.write(said.getvalue())  # the usage too, as without --json
        if exit_.code in (0, None):  # --help, --version
            raise
        lines = said.getvalue().strip().splitlines()
        command = next((a for a in argv if not a.startswith("-")), None)
        print_json(
            {
                "error": lines[-1] if lines else "bad arguments",
                "command": command,
                "status": exit_.code,
            }
        )
        raise
    return run_as_json(args)
