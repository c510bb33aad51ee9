"""`pyinfra-sglang profile new MODEL`: a profile TOML for a model, from its own files."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyinfra_sglang.cli.arguments import profile_name
from pyinfra_sglang.cli.json_output import add_json, print_json

PROFILE_EPILOG = """\
`profile new MODEL` reads MODEL's config.json (a Hub id at --revision through --hf-endpoint,
never the weights; or a folder) and writes profiles/NAME.toml: the model at the commit read,
its size with where each number came from, the parsers SGLang names for its family, and the
serving choices of --template. Point the inventory at it with
`sglang_profile_dirs = ["profiles"]` and `sglang_model_profile = "NAME"`; `validate` then
prints its fit. Exit status: 0 written, 2 for bad input (nothing written).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = PROFILE_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="write a profile for a model from its config.json")
    new.add_argument("model", help="a Hugging Face model id (org/name) or a folder")
    new.add_argument("--name", type=profile_name, help="the profile's name (default: from MODEL)")
    new.add_argument(
        "--output",
        default=None,
        metavar="FILE",
        help="where to write it (default: profiles/NAME.toml; - for standard output)",
    )
    new.add_argument("--force", action="store_true", help="replace a file already there")
    new.add_argument(
        "--template",
        type=profile_name,
        default="dense-bf16",
        help="the profile whose serving choices it takes (default: dense-bf16)",
    )
    new.add_argument("--revision", default="main", help="the Hub revision (default: main)")
    new.add_argument(
        "--hf-endpoint",
        default=None,
        metavar="URL",
        help="the Hub or a mirror (default: $HF_ENDPOINT, else https://huggingface.co)",
    )
    new.add_argument("--hf-token-file", default=None, metavar="FILE", help="for a gated model")
    add_json(new, '{"name", "path", "text"}')


def run(args: argparse.Namespace) -> int:
    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang.cli.inventory_input import Refused
    from pyinfra_sglang.cli.model_input import read_model_argument
    from pyinfra_sglang.safe_write import write_file
    from pyinfra_sglang.serving.profile_writer import profile_file_name, profile_text
    from pyinfra_sglang.serving.profiles import load_profile, profile_from_text

    endpoint = args.hf_endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    name = args.name or profile_file_name(args.model)
    path = None if args.output == "-" else Path(args.output or f"profiles/{name}.toml")
    if path is not None:
        name = path.name.removesuffix(".toml")
        if path.exists() and not args.force:
            print(f"profile new: {path} is there already; --force replaces it", file=sys.stderr)
            return 2
    try:
        files, shape = read_model_argument(args, endpoint, args.hf_token_file, "profile new:")
        # A folder is served from its absolute path (a relative one would read as a Hub id).
        model = os.path.abspath(args.model) if files.commit is None else args.model
        text = profile_text(model, files, shape, load_profile(args.template))
        profile_from_text(name, str(path or "-"), text)  # it validates as written
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    except PyinfraError as error:
        print(f"profile new: {error}", file=sys.stderr)
        return 2
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, text)
    if args.json:
        print_json({"name": name, "path": str(path) if path else None, "text": text})
    elif path is None:
        sys.stdout.write(text)
    else:
        print(f"wrote {path} (profile {name}); check it with `pyinfra-sglang validate`")
    return 0
