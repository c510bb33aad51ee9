"""Argument types every command shares: each refuses a bad value with argparse's message and
exit status 2."""

from __future__ import annotations

import argparse
import math


def positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


# Bounds on the offline commands' sizes: the largest hosts have 16-20 GPUs and a few hundred
# cores, and SGLang's multi-node mode a handful to dozens of nodes; each bound is far above.
MAX_GPUS = 64


MAX_NODES = 1024


MAX_CORES = 4096


MAX_MEM_GB = 1_000_000  # 1 PB


def at_most(most: int, what: str):
    """An argparse type: a whole number from 1 to ``most`` (a bound keeps a typo such as
    10^12 nodes from a loop over every one)."""

    def parse(text: str) -> int:
        value = positive(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"more {what} than {most}: {text!r}")
        return value

    return parse


def bind_address(text: str):
    """An IP address (IPv4 or IPv6, no zone), as the inventory's sglang_host takes it: the
    address the deployed server binds to."""
    import ipaddress

    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        address = None
    if address is None or getattr(address, "scope_id", None):
        raise argparse.ArgumentTypeError(
            f"not an IP address: {text!r} (the server binds to an IP address, as sglang_host)"
        )
    return address


def host_port(text: str) -> str:
    """--dist-init-addr: HOST:PORT as SGLang splits it (render's own check)."""
    from pyinfra_sglang.serving.render import RenderError, check_host_port

    try:
        check_host_port(text)
    except RenderError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def gigabytes(text: str) -> float:
    value = number(text)
    if not 0 < value <= MAX_MEM_GB:
        raise argparse.ArgumentTypeError(
            f"not a number of GB above 0 and at most {MAX_MEM_GB}: {text!r}"
        )
    return value


def fraction(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"not a fraction above 0 and at most 1: {text!r}")
    return value


def port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port (1 to 65535): {text!r}")
    return int(text)


def profile_name(text: str) -> str:
    from pyinfra_sglang.diagnosis.diagnose import is_plain_profile_name

    if not is_plain_profile_name(text):
        raise argparse.ArgumentTypeError(
            f"not a profile name (letters, digits, '.', '_', '-'; no '/'): {text!r}"
        )
    return text


def add_data(parser: argparse.ArgumentParser, when: str = "") -> None:
    """--data KEY=VALUE, repeatable, read as pyinfra's --data (``when``: a prefix such as
    "with --inventory: ")."""
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help=f"{when}override data, as pyinfra's --data",
    )


def key_value(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value


def cuda_archs(text: str) -> list[str]:
    """``90,120`` (or ``90;120``), in any spelling of arch.Arch (``sm_90,sm_120``, ``9.0``),
    as flash-attn spells them (``90``, ``120``)."""
    from pyinfra_sglang.arch import Arch, ArchError

    try:
        archs = [Arch.parse(arch).flash_attn for arch in text.replace(";", ",").split(",") if arch]
    except ArchError:
        archs = []
    if not archs:
        raise argparse.ArgumentTypeError(
            f"not CUDA architectures (e.g. 90 or 90,120, or sm_90,sm_120): {text!r}"
        )
    return archs


def gpu_arch(text: str) -> str:
    """``sm_120``, or build-plan's spelling ``120`` (or ``12.0``): one spelling need not be
    learnt twice. A GPU's architecture: the arch-specific ``sm_120a`` is a build target."""
    from pyinfra_sglang.arch import Arch, ArchError

    try:
        arch = Arch.parse(text)
    except ArchError:
        arch = None
    if arch is None or arch.specific:
        raise argparse.ArgumentTypeError(
            f"not a CUDA architecture: {text!r} (e.g. sm_90, sm_120, or 90, 120)"
        )
    return arch.sm


def release(text: str) -> str:
    from pyinfra_sglang.versions import parse_version

    try:
        return str(parse_version(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
