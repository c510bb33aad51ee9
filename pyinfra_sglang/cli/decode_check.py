"""`pyinfra-sglang decode-check`: ask a running SGLang server a question whose answer is known."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang.host_programs import decode_client

    decode_client.add_arguments(parser)
    parser.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="the API key alone, or the server's YAML config file (an api-key: line)",
    )


def run(args: argparse.Namespace) -> int:
    from pyinfra_sglang.host_programs import api_key, decode_client

    key = None
    if args.api_key_file:
        try:
            key = api_key.read_api_key(args.api_key_file)
        except (OSError, ValueError) as error:
            print(f"decode-check: cannot read --api-key-file: {error}", file=sys.stderr)
            return 2
    return decode_client.run(args, api_key=key)
