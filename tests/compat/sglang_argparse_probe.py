"""Runs inside a cached SGLang virtualenv (tests/compat/sglang_env.py), never under pytest.

Usage: ``python sglang_argparse_probe.py REQUEST.json RESULT.json``; the request is
{"cases": [{"name", "argv", "config_yaml"}, ...]}. Builds
SGLang's own parser the way ``sglang.srt.server_args.prepare_server_args`` does (a plain
``argparse.ArgumentParser()`` and ``ServerArgs.add_cli_args``), merges ``--config`` with
SGLang's own ConfigArgumentMerger, parses, and writes one JSON object to RESULT.json (not
to stdout, which importing SGLang may print to):

    {"sglang_version", "server_args_file", "merger_module", "options": [every option
     string the parser knows], "deprecated": {option: action class},
     "results": [{"name", "ok", "error", "unknown", "flags": {flag: dest}, "values":
     {dest: parsed value}, "warnings": [log lines], "merged_argv"}]}

Only the standard library and the venv's SGLang are imported: pyinfra_sglang is not
installed here.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from contextlib import redirect_stderr, redirect_stdout

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ParseError(Exception):
    """argparse's error(), raised instead of printing usage and exiting."""


def new_parser(server_args_class) -> argparse.ArgumentParser:
    # Exactly what prepare_server_args builds (0.5.23 adds prog="sglang serve", which only
    # changes the usage text).
    parser = argparse.ArgumentParser()
    server_args_class.add_cli_args(parser)
    return parser


def raise_instead_of_exit(parser: argparse.ArgumentParser) -> None:
    def error(message: str):
        raise ParseError(message)

    parser.error = error  # type: ignore[method-assign]


def config_merger_class():
    # The merger moved from sglang.srt.server_args_config_parser (0.5.9 .. 0.5.20 at least)
    # to sglang.srt.utils.server_args_config_parser (0.5.23).
    for name in (
        "sglang.srt.utils.server_args_config_parser",
        "sglang.srt.server_args_config_parser",
    ):
        try:
            return importlib.import_module(name).ConfigArgumentMerger, name
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
    raise ModuleNotFoundError("no ConfigArgumentMerger in this SGLang release")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def parse_case(server_args_class, merger_class, case: dict, path: str) -> dict:
    argv = list(case["argv"])
    result = {
        "name": case["name"],
        "ok": False,
        "error": None,
        "unknown": [],
        "flags": {},
        "values": {},
        "warnings": [],
        "merged_argv": None,
    }
    parser = new_parser(server_args_class)
    raise_instead_of_exit(parser)
    known = parser._option_string_actions
    flags = [word.split("=", 1)[0] for word in argv if word.startswith("--")]
    result["flags"] = {flag: known[flag].dest for flag in flags if flag in known}
    # The rendered argv names the config file on the host (/etc/sglang/sglang.yaml); parse
    # with a real file of the same rendered content in its place, so SGLang's own merger
    # reads and validates it exactly as prepare_server_args does before argparse runs.
    if "--config" in argv:
        index = argv.index("--config")
        if index + 1 < len(argv):
            with open(path, "w") as handle:
                handle.write(case.get("config_yaml") or "")
            argv[index + 1] = path
    records = Records()
    root = logging.getLogger()
    root.addHandler(records)
    previous_level = root.level
    root.setLevel(logging.DEBUG)
    noise = io.StringIO()
    try:
        with redirect_stdout(noise), redirect_stderr(noise):
            if "--config" in argv:
                argv = merger_class(parser).merge_config_with_args(argv)
            result["merged_argv"] = argv
            namespace, unknown = parser.parse_known_args(argv)
            result["unknown"] = unknown
            if not unknown:
                # What launch_server itself calls; with nothing unknown it must agree.
                namespace = parser.parse_args(argv)
        result["values"] = {
            dest: jsonable(getattr(namespace, dest, None))
            for dest in sorted(set(result["flags"].values()) | {"api_key"})
        }
        result["ok"] = not unknown
    except ParseError as error:
        result["error"] = str(error)
    except Exception as error:  # the merger raises ValueError for bad config files
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        root.removeHandler(records)
        root.setLevel(previous_level)
    lines = records.lines + [line for line in noise.getvalue().splitlines() if line.strip()]
    # Both parses run each action, so a deprecation warning comes twice; no colour codes.
    result["warnings"] = list(dict.fromkeys(ANSI.sub("", line) for line in lines))
    return result


def main() -> int:
    request_path, result_path = sys.argv[1:3]
    with open(request_path) as handle:
        request = json.load(handle)
    out = {"import_error": None}
    try:
        import sglang
        from sglang.srt import server_args as server_args_module
        from sglang.srt.server_args import ServerArgs

        merger_class, merger_module = config_merger_class()
    except BaseException:
        out["import_error"] = traceback.format_exc()
        write(result_path, out)
        return 0
    out["sglang_version"] = getattr(sglang, "__version__", None)
    out["server_args_file"] = server_args_module.__file__
    out["merger_module"] = merger_module
    parser = new_parser(ServerArgs)
    out["options"] = sorted(parser._option_string_actions)
    out["deprecated"] = {
        option: type(action).__name__
        for option, action in parser._option_string_actions.items()
        if "Deprecated" in type(action).__name__
    }
    with tempfile.TemporaryDirectory(prefix="sglang-argparse-") as workdir:
        out["results"] = [
            parse_case(ServerArgs, merger_class, case, os.path.join(workdir, f"{i}.yaml"))
            for i, case in enumerate(request["cases"])
        ]
    write(result_path, out)
    return 0


def write(path: str, out: dict) -> None:
    with open(path, "w") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    sys.exit(main())
