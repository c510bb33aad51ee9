"""`pyinfra-sglang report`: an HTML page of a benchmark run's charts and findings."""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout

from pyinfra_sglang.cli.json_output import add_json, print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang.report import page

    page.add_arguments(parser)
    add_json(parser, '{"page": path of report.html}')


def run(args: argparse.Namespace) -> int:
    from pyinfra_sglang.report import page

    if not args.json:
        return page.run(args)
    printed = io.StringIO()
    with redirect_stdout(printed):
        status = page.run(args)
    if status == 0:
        print_json({"page": printed.getvalue().strip()})
    return status
