"""The stand-in server's command line: the flags it knows, the --config YAML file, masking.

Flags are those pyinfra-sglang renders (pyinfra_sglang/data/sglang_flags.toml, copied here
by hand: this package runs on a test host, without the project) plus a few other real SGLang
flags a profile's extra_args might carry. Like the real server, a flag the installed release
does not have is an argparse error (exit 2): the NSA names and --cuda-graph-max-bs were
removed in 0.5.20, the DSA names came in 0.5.13 and --cuda-graph-max-bs-decode in 0.5.14.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from sglang.version import __version__

MASK = "********"
SECRET_FLAGS = ("--api-key",)

# (flag, kind, type, since, until): kind "value" takes one value, "switch" none; the flag
# exists in releases since <= v < until (None: no bound).
FLAGS = (
    # What pyinfra-sglang renders, in its order.
    ("--model-path", "value", str, None, None),
    ("--served-model-name", "value", str, None, None),
    ("--revision", "value", str, None, None),
    ("--tp-size", "value", int, None, None),
    ("--nnodes", "value", int, None, None),
    ("--node-rank", "value", int, None, None),
    ("--dist-init-addr", "value", str, None, None),
    ("--quantization", "value", str, None, None),
    ("--trust-remote-code", "switch", None, None, None),
    ("--attention-backend", "value", str, None, None),
    ("--nsa-prefill-backend", "value", str, "0.5.9", "0.5.20"),
    ("--dsa-prefill-backend", "value", str, "0.5.13", None),
    ("--nsa-decode-backend", "value", str, "0.5.9", "0.5.20"),
    ("--dsa-decode-backend", "value", str, "0.5.13", None),
    ("--kv-cache-dtype", "value", str, None, None),
    ("--mem-fraction-static", "value", float, None, None),
    ("--chunked-prefill-size", "value", int, None, None),
    ("--cuda-graph-max-bs", "value", int, None, "0.5.20"),
    ("--cuda-graph-max-bs-decode", "value", int, "0.5.14", None),
    ("--disable-cuda-graph", "switch", None, None, None),
    ("--disable-shared-experts-fusion", "switch", None, None, None),
    ("--reasoning-parser", "value", str, None, None),
    ("--tool-call-parser", "value", str, None, None),
    ("--watchdog-timeout", "value", float, None, None),
    ("--enable-metrics", "switch", None, None, None),
    ("--host", "value", str, None, None),
    ("--port", "value", int, None, None),
    # --config is handled before the others (its file's settings come first).
    ("--config", "value", str, None, None),
    # SGLang allows it; pyinfra-sglang puts it into the config file only.
    ("--api-key", "value", str, None, None),
    # Other real flags, accepted and ignored.
    ("--tokenizer-path", "value", str, None, None),
    ("--dtype", "value", str, None, None),
    ("--load-format", "value", str, None, None),
    ("--download-dir", "value", str, None, None),
    ("--context-length", "value", int, None, None),
    ("--dp-size", "value", int, None, None),
    ("--ep-size", "value", int, None, None),
    # MoE layouts (issue 28; data/sglang_flags.toml): DP attention's own size flag from
    # 0.5.22 (its switch is below), and the MoE all-to-all.
    ("--attn-dp-size", "value", int, "0.5.22", None),
    ("--moe-a2a-backend", "value", str, None, None),
    ("--pp-size", "value", int, None, None),
    ("--max-running-requests", "value", int, None, None),
    ("--max-total-tokens", "value", int, None, None),
    ("--page-size", "value", int, None, None),
    ("--random-seed", "value", int, None, None),
    ("--stream-interval", "value", int, None, None),
    ("--schedule-policy", "value", str, None, None),
    ("--moe-runner-backend", "value", str, None, None),
    ("--sampling-backend", "value", str, None, None),
    ("--grammar-backend", "value", str, None, None),
    ("--speculative-algorithm", "value", str, None, None),
    ("--speculative-num-steps", "value", int, None, None),
    ("--speculative-eagle-topk", "value", int, None, None),
    ("--speculative-num-draft-tokens", "value", int, None, None),
    ("--log-level", "value", str, None, None),
    ("--log-requests", "switch", None, None, None),
    ("--enable-dp-attention", "switch", None, None, None),
    ("--disable-radix-cache", "switch", None, None, None),
    ("--disable-custom-all-reduce", "switch", None, None, None),
    ("--enable-torch-compile", "switch", None, None, None),
    ("--skip-server-warmup", "switch", None, None, None),
)

DEFAULTS = {
    "host": "127.0.0.1",
    "port": 30000,
    "tp_size": 1,
    "nnodes": 1,
    "node_rank": 0,
    "watchdog_timeout": 300.0,
}


class ConfigError(ValueError):
    """The --config file cannot be read as the YAML subset the stand-in knows."""


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def flags_of(version: str = __version__) -> list[tuple[str, str, type | None]]:
    """(flag, kind, type) of the flags release ``version`` has."""
    have = parse_version(version)
    return [
        (flag, kind, type_)
        for flag, kind, type_, since, until in FLAGS
        if (since is None or have >= parse_version(since))
        and (until is None or have < parse_version(until))
    ]


def build_parser(version: str = __version__) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang.launch_server",
        description=f"SGLang {version} server (test stand-in: no model, canned answers)",
        allow_abbrev=False,
    )
    for flag, kind, type_ in flags_of(version):
        dest = flag[2:].replace("-", "_")
        if kind == "switch":
            parser.add_argument(flag, dest=dest, action="store_true")
        else:
            parser.add_argument(
                flag,
                dest=dest,
                type=type_,
                default=DEFAULTS.get(dest),
                required=flag == "--model-path",
            )
    return parser


# --- the YAML subset of --config ---------------------------------------------------------

_KEY_LINE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?$")
_TRUE = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}
_FALSE = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}
_NULL = {"", "~", "null", "Null", "NULL"}


def _after_scalar(rest: str, line_no: int) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise ConfigError(f"line {line_no}: unexpected text after the value: {rest!r}")


def _double_quoted(text: str, line_no: int) -> str:
    index = 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == '"':
            try:
                value = json.loads(text[: index + 1])
            except ValueError:
                raise ConfigError(f"line {line_no}: bad escape in {text[: index + 1]}") from None
            _after_scalar(text[index + 1 :], line_no)
            return value
        index += 1
    raise ConfigError(f"line {line_no}: unterminated double-quoted string")


def _single_quoted(text: str, line_no: int) -> str:
    chars: list[str] = []
    index = 1
    while index < len(text):
        if text[index] == "'":
            if text[index + 1 : index + 2] == "'":
                chars.append("'")
                index += 2
                continue
            _after_scalar(text[index + 1 :], line_no)
            return "".join(chars)
        chars.append(text[index])
        index += 1
    raise ConfigError(f"line {line_no}: unterminated single-quoted string")


def _plain(text: str, line_no: int):
    text = re.split(r"[ \t]#", text, maxsplit=1)[0].strip()
    if text[:1] in ("[", "{", "&", "*", "!", "|", ">", "@", "`"):
        raise ConfigError(f"line {line_no}: only scalar values are supported: {text!r}")
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", text):
        return float(text)
    return text


def parse_config_text(text: str) -> dict[str, object]:
    """Top-level ``key: value`` pairs; values are str, int, float, bool or None. Comments,
    blank lines and document markers are skipped; an empty file gives no settings."""
    settings: dict[str, object] = {}
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        if line[0] in " \t":
            raise ConfigError(f"line {line_no}: nested values are not supported: {raw!r}")
        match = _KEY_LINE.match(line)
        if not match:
            raise ConfigError(f"line {line_no}: expected 'key: value', got {raw!r}")
        key, value = match.group(1), (match.group(2) or "").strip()
        if value.startswith('"'):
            settings[key] = _double_quoted(value, line_no)
        elif value.startswith("'"):
            settings[key] = _single_quoted(value, line_no)
        else:
            settings[key] = _plain(value, line_no)
    return settings


def config_argv(settings: dict[str, object], version: str = __version__) -> list[str]:
    """The config file's settings as command-line words, put before the real ones so that
    the command line wins. ConfigError for a key that is no flag of this release."""
    kinds = {flag: kind for flag, kind, _ in flags_of(version)}
    argv: list[str] = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if flag not in kinds or flag == "--config":
            raise ConfigError(f"unknown key {key!r}: SGLang {version} has no flag {flag}")
        if value is None or value is False:
            continue
        if kinds[flag] == "switch":
            if value is not True:
                raise ConfigError(f"{key} is a switch: true or false, not {value!r}")
            argv.append(flag)
        else:
            argv += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


# --- putting it together ---------------------------------------------------------------


class Parsed:
    """The parsed arguments and where the settings came from."""

    def __init__(
        self,
        args: argparse.Namespace,
        config_path: str | None,
        config_keys: list[str],
        api_key_from: str | None,
    ):
        self.args = args
        self.config_path = config_path
        self.config_keys = config_keys
        self.api_key_from = api_key_from


def parse(argv: list[str], version: str = __version__) -> Parsed:
    """Parse like ``sglang.launch_server``; argparse exits 2 on any error."""
    parser = build_parser(version)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    pre.add_argument("--api-key")
    found, _ = pre.parse_known_args(argv)
    settings: dict[str, object] = {}
    if found.config is not None:
        if not re.search(r"\.ya?ml$", found.config):
            parser.error(f"--config {found.config}: the config file must be a .yaml or .yml file")
        try:
            text = Path(found.config).read_text(encoding="utf-8")
        except OSError as error:
            parser.error(f"--config {found.config}: cannot read it: {error.strerror}")
        try:
            settings = parse_config_text(text)
            from_file = config_argv(settings, version)
        except ConfigError as error:
            parser.error(f"--config {found.config}: {error}")
    else:
        from_file = []
    args = parser.parse_args(from_file + list(argv))
    if found.api_key is not None:
        api_key_from = "argv"
    elif args.api_key is not None:
        api_key_from = "config"
    else:
        api_key_from = None
    return Parsed(args, found.config, sorted(settings), api_key_from)


def mask_argv(argv: list[str]) -> list[str]:
    """argv with the values of secret flags replaced by the mask."""
    masked: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            masked.append(MASK)
            hide_next = False
        elif word in SECRET_FLAGS:
            masked.append(word)
            hide_next = True
        elif word.split("=", 1)[0] in SECRET_FLAGS and "=" in word:
            masked.append(word.split("=", 1)[0] + "=" + MASK)
        else:
            masked.append(word)
    return masked


def settings_of(args: argparse.Namespace) -> dict[str, object]:
    """The effective settings, sorted, secrets masked."""
    values = dict(sorted(vars(args).items()))
    for flag in SECRET_FLAGS:
        dest = flag[2:].replace("-", "_")
        if values.get(dest) is not None:
            values[dest] = MASK
    return values
