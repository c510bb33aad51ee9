"""A profile's extra_args, checked before they reach SGLang's command line: no flag that
pyinfra-sglang sets itself (every spelling of data/sglang_flags.toml, their aliases, the
secret flags), in any spelling argparse would expand to one, and no flag smuggled in as a
value."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyinfra_sglang.serving.sglang_flags import flag_table

# Server flags the renderer sets itself, besides every spelling in data/sglang_flags.toml:
# secrets (they go into the 0600 config file) and the aliases SGLang's own parser gives
# managed flags (read from the real parsers of 0.5.9, 0.5.14 and 0.5.23; tests/compat
# checks them): --model for --model-path, --tensor-parallel-size for --tp-size,
# --nccl-init-addr for --dist-init-addr; --expert-parallel-size and --ep for --ep-size,
# --data-parallel-size for --dp-size, --attention-data-parallel-size for --attn-dp-size.
SECRET_SERVER_FLAGS = ("--api-key", "--admin-api-key")
MANAGED_FLAG_ALIASES = (
    "--model",
    "--tensor-parallel-size",
    "--nccl-init-addr",
    "--expert-parallel-size",
    "--ep",
    "--data-parallel-size",
    "--attention-data-parallel-size",
)

# A negative number is a value argparse takes after a flag (``--chunked-prefill-size -1``);
# any other word starting with "-" it reads as an option of its own.
_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")


def managed_server_flags() -> frozenset[str]:
    """Every flag of ``sglang.launch_server`` that pyinfra-sglang sets itself: each spelling of
    data/sglang_flags.toml in any release, their aliases and the secret flags."""
    spellings = {s.flag for entry in flag_table().values() for s in entry.spellings}
    return frozenset(spellings | set(SECRET_SERVER_FLAGS) | set(MANAGED_FLAG_ALIASES))


def managed_flag_in(arg: str) -> str | None:
    """The managed flag ``arg`` sets (``--flag``, ``--flag=value``, or an abbreviation
    argparse would expand to it, such as ``--ho`` for ``--host``); None when it sets none."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0]
    managed = managed_server_flags()
    if name in managed:
        return name
    # argparse accepts any unambiguous prefix of a long option (allow_abbrev, SGLang's default).
    expanded = sorted(flag for flag in managed if flag.startswith(name))
    return expanded[0] if expanded else None


def dash_value_problems(extra_args: Iterable[str]) -> list[str]:
    """One line per extra argument that SGLang's parser would read as an option although it
    stands where a value goes: a word of one "-" (``-x``; SGLang's flags are all ``--``), a
    ``--flag=VALUE`` whose value starts with "-". Negative numbers (``-1``) are values; a
    word of two dashes, ``--flag``, is a flag (managed_flag_problems checks it)."""
    problems = []
    for arg in extra_args:
        if not isinstance(arg, str) or not arg.startswith("-") or _NEGATIVE_NUMBER.match(arg):
            continue
        if arg == "--":
            continue  # the end of options: nothing after it is read as a flag
        if not arg.startswith("--"):
            problems.append(
                f"{arg!r} starts with '-': SGLang's parser reads it as an option, not as the "
                "value of the flag before it, and SGLang's flags start with '--'. A value "
                "may start with '-' only when it is a number (-1)"
            )
        else:
            name, equals, value = arg.partition("=")
            if equals and value.startswith("-") and not _NEGATIVE_NUMBER.match(value):
                problems.append(
                    f"{name}'s value starts with '-' ({name}=-...): a flag's value may start "
                    "with '-' only when it is a number (-1); a flag smuggled in as a value "
                    "is refused"
                )
    return problems


def extra_args_problems(extra_args: Iterable[str]) -> list[str]:
    """Everything refused in a profile's extra_args: managed flags (dash_value_problems
    too: a flag given as another flag's value is read by the parser as a flag)."""
    args = list(extra_args)
    return managed_flag_problems(args) + dash_value_problems(args)


def managed_flag_problems(extra_args: Iterable[str]) -> list[str]:
    """One line per extra argument that would set a managed flag."""
    problems = []
    for arg in extra_args:
        flag = managed_flag_in(arg)
        if flag is None:
            continue
        name = arg.split("=", 1)[0]
        shown = name if name == flag else f"{name} (argparse reads it as {flag})"
        if flag in SECRET_SERVER_FLAGS:
            problems.append(
                f"{shown} must not be on the command line; set sglang_api_key_file, it goes "
                "into the server's 0600 config file"
            )
        else:
            problems.append(
                f"{shown} is set by pyinfra-sglang (from the profile's fields and the "
                "inventory); extra_args must not set it"
            )
    return problems
