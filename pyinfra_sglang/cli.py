"""The `pyinfra-sglang` command: offline tools that share code with the deploys."""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
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


# --- --json: one strict JSON document on stdout, errors too ----------------------------


def _add_json(parser: argparse.ArgumentParser, shape: str) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f'print one JSON document instead: {shape}; an error as {{"error", "command", '
        '"status"}, with the same exit status',
    )


def _strict_json(value: object) -> str:
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


def _print_json(value: object) -> None:
    sys.stdout.write(_strict_json(value))


def _run_as_json(args: argparse.Namespace) -> int:
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
    _print_json(value)
    return status


def _json_wanted(argv: list[str]) -> bool:
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


# --- argument types: each refuses a bad value with argparse's message and exit status 2 ---


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


# Bounds on the offline commands' sizes: the largest hosts have 16-20 GPUs and a few hundred
# cores, and SGLang's multi-node mode a handful to dozens of nodes; each bound is far above.
MAX_GPUS = 64
MAX_NODES = 1024
MAX_CORES = 4096
MAX_MEM_GB = 1_000_000  # 1 PB


def _at_most(most: int, what: str):
    """An argparse type: a whole number from 1 to ``most`` (a bound keeps a typo such as
    10^12 nodes from a loop over every one)."""

    def parse(text: str) -> int:
        value = _positive(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"more {what} than {most}: {text!r}")
        return value

    return parse


def _bind_address(text: str) -> str:
    """An IP address (IPv4 or IPv6) or a DNS name, as SGLang's --host takes it."""
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*", text):
        return text
    raise argparse.ArgumentTypeError(f"not an IP address or host name: {text!r}")


def _host_port(text: str) -> str:
    """--dist-init-addr: HOST:PORT as SGLang splits it (render's own check)."""
    from pyinfra_sglang.serving.render import RenderError, check_host_port

    try:
        check_host_port(text)
    except RenderError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
    if not 0 < value <= MAX_MEM_GB:
        raise argparse.ArgumentTypeError(
            f"not a number of GB above 0 and at most {MAX_MEM_GB}: {text!r}"
        )
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


# --- inventory-reference ----------------------------------------------------------------


def _inventory_reference_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--write", metavar="FILE", help="update the reference block in this file instead"
    )
    _add_json(parser, '{"fields": [{"name", "default", "allowed", "description"}]}')


def _inventory_reference(args: argparse.Namespace) -> int:
    from pyinfra_sglang import inventory
    from pyinfra_sglang.config.reference import reference_markdown, with_reference

    if args.write:
        path = Path(args.write)
        try:
            path.write_text(with_reference(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            print(f"inventory-reference: cannot update {path}: {error}", file=sys.stderr)
            return 2
        if args.json:
            _print_json({"written": str(path)})
        return 0
    if args.json:
        from pydantic_core import to_jsonable_python

        fields = [
            {
                "name": name,
                "default": to_jsonable_python(
                    info.get_default(call_default_factory=True), fallback=str
                ),
                "allowed": inventory.field_allowed(name),
                "description": info.description,
            }
            for name, info in inventory.HostConfig.model_fields.items()
        ]
        _print_json({"fields": fields})
        return 0
    sys.stdout.write(reference_markdown())
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
    _add_json(
        parser,
        '{"inventory", "hosts": [names]}; invalid: {"error", "problems": [{"host", "field", '
        '"value", "source", "message", "allowed"}]}',
    )


class _Refused(Exception):
    """A command cannot go on; ``status``: its exit status (the message is printed)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _load_inventory(command: str, path: str, data: list[tuple[str, str]]):
    """The pyinfra Inventory of the file ``path`` with ``--data`` over it; _Refused (2) when
    it cannot be loaded or holds no hosts."""
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra_cli.util import parse_cli_arg

    from pyinfra_sglang import inventory

    # Parse --data exactly as the pyinfra CLI does, so both see the same values.
    override = {key: parse_cli_arg(value) for key, value in data}
    source = Path(path)
    # A path (pyinfra would take anything else for a host name and look it up in DNS).
    looks_like_a_file = "/" in path or path.endswith(".py")
    if source.is_dir() or (looks_like_a_file and not source.is_file()):
        what = "a folder" if source.is_dir() else "no such file"
        raise _Refused(f"{command}: {path}: {what}, not an inventory file", 2)
    try:
        loaded = inventory.load_inventory_file(path, override_data=override)
    except Exception as error:  # the inventory is the user's Python: anything may go wrong
        why = str(error) if isinstance(error, PyinfraError) else f"{type(error).__name__}: {error}"
        raise _Refused(f"{command}: cannot load the inventory {path}: {why}", 2) from None
    if not len(loaded):
        raise _Refused(
            f"{command}: {path}: no hosts (not an inventory file, a host list or a module "
            "pyinfra can load)",
            2,
        )
    return loaded


def _invalid(args: argparse.Namespace, error) -> int:
    """An InventoryError as the command prints it; exit status 1."""
    from dataclasses import asdict

    if args.json:
        problems = [asdict(problem) for problem in error.problems]
        _print_json({"error": str(error).splitlines()[0], "problems": problems})
    else:
        print(error, file=sys.stderr)
    return 1


def _validate(args: argparse.Namespace) -> int:
    from pyinfra_sglang import inventory

    try:
        loaded = _load_inventory("validate", args.inventory, args.data)
    except _Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    try:
        configs = inventory.validate_inventory(loaded)
    except inventory.InventoryError as error:
        return _invalid(args, error)
    if args.json:
        _print_json({"inventory": args.inventory, "hosts": list(configs)})
        return 0
    for name in configs:
        print(f"{name}: ok")
    return 0


# --- build-plan --------------------------------------------------------------------------


def _build_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cores",
        type=_at_most(MAX_CORES, "cores"),
        required=True,
        help=f"CPU cores of the build host (1 to {MAX_CORES})",
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
    _add_json(
        parser,
        '{"env": {VARIABLE: value}, "max_jobs", "nvcc_threads", "archs", "cores", '
        '"available_gb", "memory_fraction", "bound_gb", "estimated_peak_gb"}',
    )


def _build_plan(args: argparse.Namespace) -> int:
    from pyinfra_sglang.host.flash_attn_build_plan import BuildPlanError, plan_flash_attn_build

    archs = args.archs or ["90"]
    try:
        plan = plan_flash_attn_build(args.cores, args.mem_gb, archs, args.memory_fraction)
    except BuildPlanError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(
            {
                "env": plan.env(),
                "max_jobs": plan.max_jobs,
                "nvcc_threads": plan.nvcc_threads,
                "archs": list(plan.archs),
                "cores": plan.cores,
                "available_gb": plan.available_gb,
                "memory_fraction": plan.memory_fraction,
                "bound_gb": plan.bound_gb,
                "estimated_peak_gb": plan.estimated_peak_gb,
            }
        )
        return 0
    # Quoted for a shell: FLASH_ATTN_CUDA_ARCHS=90;120 unquoted would end at the ";".
    print(" ".join(f"{key}={shlex.quote(value)}" for key, value in plan.env().items()))
    print(
        f"estimated peak {plan.estimated_peak_gb:.0f} GB of a {plan.bound_gb:.0f} GB bound "
        f"({plan.memory_fraction:.0%} of {plan.available_gb:g} GB available), {plan.cores} cores"
    )
    return 0


# --- render ------------------------------------------------------------------------------


def _arch(text: str) -> str:
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


def _release(text: str) -> str:
    from pyinfra_sglang.versions import parse_version

    try:
        return str(parse_version(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


RENDER_EPILOG = """\
Preview before a deploy: `pyinfra-sglang render --inventory INVENTORY --inventory-host NAME`
prints exactly the files that host would get (its unit, env and config files, a router host's
sglang-router unit, a multi-node member's --nnodes/--node-rank/--dist-init-addr), rendered by
the same functions the deploy calls, for the GPUs the inventory plans for (or those given
with --gpus and --arch), secrets masked. What the deploy would run on each host: pyinfra's
own dry run, `uv run pyinfra INVENTORY deploy/site.py --dry` (docs/roles.md).
"""


def _render_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = RENDER_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--inventory",
        default=None,
        metavar="FILE",
        help="render what a host of this inventory would get (with --inventory-host)",
    )
    parser.add_argument(
        "--inventory-host",
        default=None,
        metavar="NAME",
        help="the inventory host to render for, as the inventory names it",
    )
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="with --inventory: override data, as pyinfra's --data",
    )
    parser.add_argument(
        "--profile",
        type=_profile_name,
        help="model profile, e.g. glm-5-nvfp4 (required without --inventory)",
    )
    parser.add_argument(
        "--gpus",
        type=_at_most(MAX_GPUS, "GPUs per host"),
        help="GPUs per host (required without --inventory; with it: instead of those planned)",
    )
    parser.add_argument(
        "--arch",
        type=_arch,
        help="GPU architecture, e.g. sm_120 (required with --gpus)",
    )
    parser.add_argument(
        "--sglang-version",
        type=_release,
        help="SGLang release, e.g. 0.5.23 (required without --inventory)",
    )
    parser.add_argument(
        "--gpu-mem-gb",
        type=_gigabytes,
        default=None,
        help="memory per GPU, GB (default: the largest GPU of --arch in data/gpus.toml)",
    )
    parser.add_argument(
        "--host", type=_bind_address, default=None, help="bind address (default 127.0.0.1)"
    )
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
    parser.add_argument(
        "--nnodes",
        type=_at_most(MAX_NODES, "nodes"),
        default=1,
        help="without --inventory: nodes of a multi-node server (default 1)",
    )
    parser.add_argument(
        "--node-rank",
        type=int,
        default=0,
        help="without --inventory: this node's rank, 0 .. nnodes-1 (default 0)",
    )
    parser.add_argument(
        "--dist-init-addr",
        type=_host_port,
        default=None,
        metavar="HOST:PORT",
        help="without --inventory: the first node's rendezvous address, the same on every node",
    )
    _add_json(
        parser,
        '{"host", "profile", "sglang_version", "gpus": {"count", "memory_gb", "arch", '
        '"pcie_only", "widest_path"}, "node": {"nnodes", "rank", "dist_init_addr"}, "files": '
        '[{"path", "mode", "content"}], "removes": [paths]}',
    )


def _read_topology(path: Path) -> dict[str, dict[str, str]]:
    """A topo -m matrix from a file; RenderError naming the file when it holds none."""
    from pyinfra_sglang.parsers.topo import parse_topo_matrix
    from pyinfra_sglang.serving.render import RenderError

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


FLAG_MODE = ("--profile", "--gpus", "--arch", "--sglang-version")
INVENTORY_ONLY = ("--data",)
FLAGS_ONLY = ("--sglang-version", "--host", "--port", "--venv", "--profile")
MULTINODE_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")


def _given(args: argparse.Namespace, option: str) -> bool:
    value = getattr(args, option.lstrip("-").replace("-", "_"))
    defaults = {"--nnodes": 1, "--node-rank": 0, "--data": []}
    return value is not None and value != defaults.get(option)


def _given_gpus(args: argparse.Namespace):
    """The GpuSet --gpus, --arch, --gpu-mem-gb, --pcie-only and --topo describe, and the
    spec-table GPU it assumed (None when the memory was given and the arch is not known)."""
    from pyinfra_sglang import gpus
    from pyinfra_sglang.parsers.topo import topology_has_nvlink, widest_pcie_path

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
    from pyinfra_sglang.serving.placement import GpuSet

    return GpuSet(args.gpus, memory_gb, args.arch, pcie_only, widest), spec


def _gpus_text(gpu_set, how: str) -> str:
    return (
        f"{gpu_set.count} x {gpu_set.memory_gb:g} GB {gpu_set.arch} ({how}), "
        f"PCIe only: {'yes' if gpu_set.pcie_only else 'no'}"
    )


def _interconnect_estimate(placement, spec) -> list[str]:
    """What the placed profile's layout (and the others) would move over the GPU links
    (parallelism.py), as `render` prints it on stderr."""
    from pyinfra_sglang.serving import parallelism

    gpu_set = placement.gpus
    link = parallelism.link_for(spec, gpu_set.pcie_only, gpu_set.count)
    if placement.node.nnodes > 1:
        link = None  # the network between nodes is not in the GPU table
    return parallelism.estimate_lines(placement.profile, placement.tp_size, link, gpu_set.memory_gb)


def _render_from_flags(args: argparse.Namespace) -> dict:
    from pyinfra_sglang import inventory
    from pyinfra_sglang.host.model_snapshot import is_local_model
    from pyinfra_sglang.serving import profiles, render
    from pyinfra_sglang.serving.placement import NodePosition, place

    defaults = inventory.HostConfig.model_fields
    profile = profiles.load_profile(args.profile, args.profile_dir)
    local = is_local_model(profile.model)
    gpu_set, spec = _given_gpus(args)
    node = NodePosition(args.nnodes, args.node_rank, args.dist_init_addr)
    from pyinfra_sglang.config.releases_read import unread_release

    unread = unread_release(args.sglang_version, routed=False)
    if unread is not None:
        # A preview is not refused as a deploy would be: it says what it rendered with.
        print(f"render: warning: {unread.why}; {unread.accepted}", file=sys.stderr)
    if args.host and not _loopback(args.host):
        # The preview renders an API key (masked); a deploy to that bind requires one.
        print(
            f"render: --host {args.host} is not a loopback address: a deploy serves it only "
            "with an API key (sglang_api_key_file), which this preview renders masked",
            file=sys.stderr,
        )
    placement = place(profile, gpu_set, node, args.sglang_version)
    service = render.ServiceSpec(
        placement=placement,
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
    files = render.render_service_files(service)
    how = f"{spec.name}, the largest {args.arch} GPU known" if args.gpu_mem_gb is None else "given"
    nodes = f", node {node.rank} of {node.nnodes}" if node.nnodes > 1 else ""
    return {
        "header": f"# profile {profile.name}, SGLang {args.sglang_version}, "
        f"{_gpus_text(gpu_set, how)}{nodes}; secrets masked",
        "host": None,
        "profile": profile.name,
        "sglang_version": args.sglang_version,
        "gpus": gpu_set,
        "node": node,
        "files": files,
        "removes": [],
        "estimate": _interconnect_estimate(placement, spec),
    }


def _render_from_inventory(args: argparse.Namespace) -> dict:
    """What --inventory-host of --inventory would get: validated as a deploy validates it,
    its place in its multi-node group from the inventory, rendered by service_files (the
    deploy's own function) with the GPUs planned (or given), secrets masked."""
    from pyinfra_sglang import inventory
    from pyinfra_sglang.serving import service_files

    loaded = _load_inventory("render", args.inventory, args.data)
    names = [host.name for host in loaded]
    if args.inventory_host not in names:
        raise _Refused(
            f"render: {args.inventory}: no host {args.inventory_host!r}; its hosts: "
            f"{', '.join(names)}",
            2,
        )
    configs = inventory.validate_inventory(loaded)
    host = loaded.get_host(args.inventory_host)
    config = configs[args.inventory_host]
    profile = inventory.host_profile(config)
    node = inventory.node_position_in(config, host)
    if args.gpus is not None:
        gpu_set, planned = _given_gpus(args)
        how = "given"
    else:
        gpu_set = service_files.planned_gpus(config, profile, node.nnodes)
        planned = service_files.planned_gpu(profile, config.expected_gpu_model)
        how = f"planned: {planned.name if planned else 'an unknown GPU'}"
        gpu_set, how = _planned_with_options(args, gpu_set, how)
    from pyinfra_sglang.serving.placement import place

    placement = place(profile, gpu_set, node, config.sglang_version)
    rendered = service_files.service_files_for(
        config, placement, service_files.masked_secrets(config), True
    )
    nodes = (
        f", node {node.rank} of {node.nnodes} of group {config.sglang_multinode_group}"
        if config.sglang_multinode_group
        else ""
    )
    return {
        "header": f"# host {args.inventory_host} of {args.inventory}: profile {profile.name}, "
        f"SGLang {config.sglang_version}, {_gpus_text(gpu_set, how)}{nodes}; secrets masked",
        "host": args.inventory_host,
        "profile": profile.name,
        "sglang_version": config.sglang_version,
        "gpus": gpu_set,
        "node": node,
        "files": list(rendered.files),
        "removes": list(rendered.stale),
        "estimate": _interconnect_estimate(placement, planned),
    }


def _planned_with_options(args: argparse.Namespace, gpu_set, how: str):
    """The planned GPUs with what --gpu-mem-gb, --pcie-only and --topo say of them: each
    option given counts (they were ignored without --gpus)."""
    import dataclasses

    from pyinfra_sglang.parsers.topo import topology_has_nvlink, widest_pcie_path

    changes: dict = {}
    said = []
    if args.gpu_mem_gb is not None:
        changes["memory_gb"] = args.gpu_mem_gb
        said.append("--gpu-mem-gb")
    if args.topo is not None:
        matrix = _read_topology(args.topo)
        changes["pcie_only"] = gpu_set.count > 1 and not topology_has_nvlink(matrix)
        changes["widest_path"] = widest_pcie_path(matrix)
        said.append("--topo")
    if args.pcie_only:
        changes["pcie_only"] = True
        said.append("--pcie-only")
    if not changes:
        return gpu_set, how
    return dataclasses.replace(gpu_set, **changes), f"{how}; {', '.join(said)} given"


def _render_mode_problem(args: argparse.Namespace) -> str | None:
    """Which options do not go together, or are missing; None when they fit."""
    if args.inventory or args.inventory_host:
        if not (args.inventory and args.inventory_host):
            return "--inventory and --inventory-host go together"
        given = [o for o in (*FLAGS_ONLY, *MULTINODE_FLAGS) if _given(args, o)]
        if given:
            return f"{', '.join(given)}: from the inventory with --inventory; leave it out"
        if args.gpus is not None and args.arch is None:
            return "--gpus needs --arch"
        return None
    missing = [option for option in FLAG_MODE if not _given(args, option)]
    if missing:
        return (
            f"give {', '.join(missing)} (or --inventory FILE --inventory-host NAME to render "
            "an inventory host's files)"
        )
    if _given(args, "--data"):
        return "--data goes with --inventory"
    return None


def _render_service(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang import inventory

    problem = _render_mode_problem(args)
    if problem:
        print(f"render: {problem}", file=sys.stderr)
        return 2
    try:
        preview = _render_from_inventory(args) if args.inventory else _render_from_flags(args)
    except _Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    except inventory.InventoryError as error:
        return _invalid(args, error)
    except PyinfraError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(
            {
                "host": preview["host"],
                "profile": preview["profile"],
                "sglang_version": preview["sglang_version"],
                "gpus": asdict(preview["gpus"]),
                "node": asdict(preview["node"]),
                "files": [
                    {"path": f.path, "mode": f.mode, "content": f.content} for f in preview["files"]
                ],
                "removes": preview["removes"],
            }
        )
        return 0
    # On stderr, so that stdout stays the files alone.
    for line in preview["estimate"]:
        print(f"# {line}", file=sys.stderr)
    print(preview["header"])
    for file in preview["files"]:
        print(f"\n# ==> {file.path} (mode {file.mode}) <==")
        sys.stdout.write(file.content)
    for path in preview["removes"]:
        print(f"\n# ==> {path} <== removed if present (no unit of it configured)")
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
    from pyinfra_sglang.host.driver_plan import platform_names

    nvidia = data.nvidia()
    parser.add_argument("--platform", choices=platform_names(), required=True)
    parser.add_argument("--install", choices=("compute", "full"), default="compute")
    parser.add_argument("--modules", choices=("open", "proprietary"), default="open")
    parser.add_argument(
        "--branch",
        type=int,
        choices=nvidia.driver_branches,
        default=nvidia.default_driver_branch,
    )
    _add_json(
        parser,
        '{"platform", "family", "branch", "pin", "packages": [[candidates]], '
        '"module_packages", "headers", "mirror_extra"}',
    )


def _packages(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pyinfra_sglang.host.driver_plan import driver_apt_plan, format_plan

    plan = driver_apt_plan(args.platform, args.install, args.modules, args.branch)
    if args.json:
        _print_json(asdict(plan))
        return 0
    sys.stdout.write(format_plan(plan))
    return 0


# --- report ------------------------------------------------------------------------------


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    from pyinfra_sglang.report import page

    page.add_arguments(parser)
    _add_json(parser, '{"page": path of report.html}')


def _report(args: argparse.Namespace) -> int:
    from pyinfra_sglang.report import page

    if not args.json:
        return page.run(args)
    printed = io.StringIO()
    with redirect_stdout(printed):
        status = page.run(args)
    if status == 0:
        _print_json({"page": printed.getvalue().strip()})
    return status


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
        _lazy("pyinfra_sglang.diagnosis.ab_compare:add_arguments"),
        _lazy("pyinfra_sglang.diagnosis.ab_compare:run"),
    ),
    Command(
        "report",
        "write an HTML page of a benchmark run's charts and findings (an A/B page of two)",
        _report_arguments,
        _report,
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
    if not _json_wanted(argv):
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
        _print_json(
            {
                "error": lines[-1] if lines else "bad arguments",
                "command": command,
                "status": exit_.code,
            }
        )
        raise
    return _run_as_json(args)


if __name__ == "__main__":
    raise SystemExit(main())
