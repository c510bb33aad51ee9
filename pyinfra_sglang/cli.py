"""The `pyinfra-sglang` command: offline tools that share code with the deploys."""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Every import of the project's modules is inside the function that needs it: pyinfra,
# pydantic and matplotlib took ~3 s to load, for `--help` too (bench/cli_startup.py).


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


# --- argument types: each refuses a bad value with argparse's message and exit status 2 ---


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _gigabytes(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a number of GB above 0: {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"not a fraction above 0 and at most 1: {text!r}")
    return value


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port (1 to 65535): {text!r}")
    return int(text)


def _profile_name(text: str) -> str:
    from pyinfra_sglang.diagnosis.diagnose import is_plain_profile_name

    if not is_plain_profile_name(text):
        raise argparse.ArgumentTypeError(
            f"not a profile name (letters, digits, '.', '_', '-'; no '/'): {text!r}"
        )
    return text


def _key_value(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value


def _cuda_archs(text: str) -> list[str]:
    """``90,120`` (or ``90;120``), in flash-attn's spelling or render's (``sm_90,sm_120``)."""
    archs = [arch.removeprefix("sm_") for arch in text.replace(";", ",").split(",") if arch]
    bad = [arch for arch in archs if not re.fullmatch(r"\d{2,3}a?", arch)]
    if not archs or bad:
        raise argparse.ArgumentTypeError(
            f"not CUDA architectures (e.g. 90 or 90,120, or sm_90,sm_120): {text!r}"
        )
    return archs


# --- inventory-reference ----------------------------------------------------------------


def _inventory_reference_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--write", metavar="FILE", help="update the reference block in this file instead"
    )


def _inventory_reference(args: argparse.Namespace) -> int:
    from pyinfra_sglang import inventory

    if args.write:
        path = Path(args.write)
        try:
            path.write_text(inventory.with_reference(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            print(f"inventory-reference: cannot update {path}: {error}", file=sys.stderr)
            return 2
        return 0
    sys.stdout.write(inventory.reference_markdown())
    return 0


# --- validate ----------------------------------------------------------------------------


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", help="inventory file, as given to pyinfra")
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="override data, as pyinfra's --data",
    )


def _validate(args: argparse.Namespace) -> int:
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra_cli.util import parse_cli_arg

    from pyinfra_sglang import inventory

    # Parse --data exactly as the pyinfra CLI does, so both see the same values.
    override = {key: parse_cli_arg(value) for key, value in args.data}
    source = Path(args.inventory)
    # A path (pyinfra would take anything else for a host name and look it up in DNS).
    looks_like_a_file = "/" in args.inventory or args.inventory.endswith(".py")
    if source.is_dir() or (looks_like_a_file and not source.is_file()):
        what = "a folder" if source.is_dir() else "no such file"
        print(f"validate: {args.inventory}: {what}, not an inventory file", file=sys.stderr)
        return 2
    try:
        loaded = inventory.load_inventory_file(args.inventory, override_data=override)
    except Exception as error:  # the inventory is the user's Python: anything may go wrong
        why = str(error) if isinstance(error, PyinfraError) else f"{type(error).__name__}: {error}"
        print(f"validate: cannot load the inventory {args.inventory}: {why}", file=sys.stderr)
        return 2
    if not len(loaded):
        print(
            f"validate: {args.inventory}: no hosts (not an inventory file, a host list or a "
            "module pyinfra can load)",
            file=sys.stderr,
        )
        return 2
    try:
        configs = inventory.validate_inventory(loaded)
    except inventory.InventoryError as error:
        print(error, file=sys.stderr)
        return 1
    for name in configs:
        print(f"{name}: ok")
    return 0


# --- build-plan --------------------------------------------------------------------------


def _build_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cores", type=_positive, required=True, help="CPU cores of the build host (1 or more)"
    )
    parser.add_argument(
        "--mem-gb", type=_gigabytes, required=True, help="available memory, GB (above 0)"
    )
    parser.add_argument(
        "--archs",
        type=_cuda_archs,
        help="CUDA architectures, e.g. 90 or 90,120 (default: 90)",
    )
    parser.add_argument(
        "--memory-fraction",
        type=_fraction,
        default=None,
        help="share of available memory the build may use, above 0 and at most 1 (default "
        "from data/python.toml)",
    )


def _build_plan(args: argparse.Namespace) -> int:
    from pyinfra_sglang.flash_attn_build_plan import BuildPlanError, plan_flash_attn_build

    archs = args.archs or ["90"]
    try:
        plan = plan_flash_attn_build(args.cores, args.mem_gb, archs, args.memory_fraction)
    except BuildPlanError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    # Quoted for a shell: FLASH_ATTN_CUDA_ARCHS=90;120 unquoted would end at the ";".
    print(" ".join(f"{key}={shlex.quote(value)}" for key, value in plan.env().items()))
    print(
        f"estimated peak {plan.estimated_peak_gb:.0f} GB of a {plan.bound_gb:.0f} GB bound "
        f"({plan.memory_fraction:.0%} of {plan.available_gb:g} GB available), {plan.cores} cores"
    )
    return 0


# --- render ------------------------------------------------------------------------------


def _arch(text: str) -> str:
    """``sm_120``, or build-plan's spelling ``120``: one spelling need not be learnt twice."""
    arch = text if text.startswith("sm_") else f"sm_{text}"
    if not re.fullmatch(r"sm_\d{2,3}", arch):
        raise argparse.ArgumentTypeError(
            f"not a CUDA architecture: {text!r} (e.g. sm_90, sm_120, or 90, 120)"
        )
    return arch


def _release(text: str) -> str:
    from pyinfra_sglang.versions import parse_version

    try:
        return str(parse_version(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _render_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile", type=_profile_name, required=True, help="model profile, e.g. glm-5-nvfp4"
    )
    parser.add_argument("--gpus", type=_positive, required=True, help="GPUs per host")
    parser.add_argument("--arch", type=_arch, required=True, help="GPU architecture, e.g. sm_120")
    parser.add_argument(
        "--sglang-version", type=_release, required=True, help="SGLang release, e.g. 0.5.23"
    )
    parser.add_argument(
        "--gpu-mem-gb",
        type=_gigabytes,
        default=None,
        help="memory per GPU, GB (default: the largest GPU of --arch in data/gpus.toml)",
    )
    parser.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=None, help="port (default 30000)")
    parser.add_argument("--venv", default=None, help="virtualenv on the host")
    parser.add_argument(
        "--profile-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of your own profiles, searched before the built-in ones (repeatable)",
    )
    parser.add_argument(
        "--pcie-only",
        action="store_true",
        help="add the NCCL hints for PCIe-only GPUs (default: when the GPU has no NVLink)",
    )
    parser.add_argument(
        "--topo",
        type=Path,
        default=None,
        metavar="FILE",
        help="the host's `nvidia-smi topo -m` output: NVLink or PCIe, and NCCL_P2P_LEVEL from "
        "its widest path (default: the spec table's NVLink, NCCL_P2P_LEVEL=PHB)",
    )


def _read_topology(path: Path) -> dict[str, dict[str, str]]:
    """A topo -m matrix from a file; RenderError naming the file when it holds none."""
    from pyinfra_sglang.parsers.topo import parse_topo_matrix
    from pyinfra_sglang.render import RenderError

    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as error:
        raise RenderError(f"--topo {path}: cannot read it: {error.strerror}") from None
    matrix = parse_topo_matrix(lines)
    if not matrix:
        raise RenderError(
            f"--topo {path}: no GPU rows of `nvidia-smi topo -m` (a header line of GPU0 GPU1 "
            "..., then one row per GPU) in it"
        )
    return matrix


def _render_service(args: argparse.Namespace) -> int:
    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang import gpus, inventory, profiles, render
    from pyinfra_sglang.model_snapshot import is_local_model
    from pyinfra_sglang.parsers.topo import topology_has_nvlink, widest_pcie_path

    defaults = inventory.HostConfig.model_fields
    try:
        profile = profiles.load_profile(args.profile, args.profile_dir)
        local = is_local_model(profile.model)
        # The spec table's largest GPU of the arch gives the memory (unless given) and links.
        in_table = args.arch in gpus.known_archs()
        spec = gpus.largest_gpu_of_arch(args.arch) if in_table or args.gpu_mem_gb is None else None
        memory_gb = args.gpu_mem_gb if args.gpu_mem_gb is not None else spec.memory_gb
        pcie_only = args.pcie_only or (args.gpus > 1 and spec is not None and not spec.nvlink)
        widest = None
        if args.topo is not None:
            matrix = _read_topology(args.topo)
            pcie_only = args.pcie_only or (args.gpus > 1 and not topology_has_nvlink(matrix))
            widest = widest_pcie_path(matrix)
        service = render.ServiceSpec(
            profile=profile,
            sglang_version=args.sglang_version,
            gpus=render.GpuSet(args.gpus, memory_gb, args.arch, pcie_only, widest),
            host=args.host or str(defaults["sglang_host"].default),
            port=args.port or defaults["sglang_port"].default,
            venv_path=args.venv
            or inventory.versioned_venv_path(
                args.sglang_version,
                defaults["python_version"].default,
                defaults["cuda_version"].default,
            ),
            secrets=render.Secrets(api_key="(set)", hf_token="(set)"),
            mask=True,
            # As a host with no sglang_model_revision gets it (service_files.py): a Hub model
            # at the profile's pinned commit, served offline from the downloaded snapshot.
            model_revision=None if local else profile.revision,
            offline=not local,
        )
        rendered = render.render_service_files(service)
    except PyinfraError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    gpu = f"{spec.name}, the largest {args.arch} GPU known" if args.gpu_mem_gb is None else "given"
    print(
        f"# profile {profile.name}, SGLang {args.sglang_version}, {args.gpus} x {memory_gb:g} GB "
        f"{args.arch} ({gpu}), PCIe only: {'yes' if pcie_only else 'no'}; secrets masked"
    )
    for file in rendered:
        print(f"\n# ==> {file.path} (mode {file.mode}) <==")
        sys.stdout.write(file.content)
    return 0


# --- decode-check ------------------------------------------------------------------------


def _decode_check_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang.host_programs import decode_client

    decode_client.add_arguments(parser)
    parser.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="the API key alone, or the server's YAML config file (an api-key: line)",
    )


def _decode_check(args: argparse.Namespace) -> int:
    from pyinfra_sglang.host_programs import api_key, decode_client

    key = None
    if args.api_key_file:
        try:
            key = api_key.read_api_key(args.api_key_file)
        except (OSError, ValueError) as error:
            print(f"decode-check: cannot read --api-key-file: {error}", file=sys.stderr)
            return 2
    return decode_client.run(args, api_key=key)


# --- packages ----------------------------------------------------------------------------


def _packages_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang import data
    from pyinfra_sglang.driver_plan import platform_names

    nvidia = data.load("nvidia")
    parser.add_argument("--platform", choices=platform_names(), required=True)
    parser.add_argument("--install", choices=("compute", "full"), default="compute")
    parser.add_argument("--modules", choices=("open", "proprietary"), default="open")
    parser.add_argument(
        "--branch",
        type=int,
        choices=nvidia["driver_branches"],
        default=nvidia["default_driver_branch"],
    )


def _packages(args: argparse.Namespace) -> int:
    from pyinfra_sglang.driver_plan import driver_apt_plan, format_plan

    plan = driver_apt_plan(args.platform, args.install, args.modules, args.branch)
    sys.stdout.write(format_plan(plan))
    return 0


COMMANDS = (
    Command(
        "inventory-reference",
        "print the inventory fields as a Markdown table",
        _inventory_reference_arguments,
        _inventory_reference,
    ),
    Command(
        "validate",
        "validate an inventory's host and group data without connecting",
        _validate_arguments,
        _validate,
    ),
    Command(
        "build-plan",
        "print the flash-attn build plan for a host size, touching no host",
        _build_plan_arguments,
        _build_plan,
    ),
    Command(
        "render",
        "print the SGLang unit, env file and config file for a profile, touching no host",
        _render_arguments,
        _render_service,
    ),
    Command(
        "packages",
        "print the NVIDIA driver's apt plan for a platform, touching no host",
        _packages_arguments,
        _packages,
    ),
    Command(
        "decode-check",
        "ask a running SGLang server a question whose answer is known",
        _decode_check_arguments,
        _decode_check,
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
        _lazy("pyinfra_sglang.served_benchmark.ab_compare:add_arguments"),
        _lazy("pyinfra_sglang.served_benchmark.ab_compare:run"),
    ),
    Command(
        "report",
        "write an HTML page of a benchmark run's charts and findings (an A/B page of two)",
        _lazy("pyinfra_sglang.report.page:add_arguments"),
        _lazy("pyinfra_sglang.report.page:run"),
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
    args = build_parser(argv).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
