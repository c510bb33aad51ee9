"""`pyinfra-sglang render`: the SGLang unit, env file and config file for a profile or an
inventory host, touching no host."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyinfra_sglang.cli.arguments import (
    MAX_GPUS,
    MAX_NODES,
    add_data,
    at_most,
    bind_address,
    gigabytes,
    gpu_arch,
    host_port,
    port,
    profile_name,
    release,
)
from pyinfra_sglang.cli.inventory_input import Refused, invalid, load_inventory
from pyinfra_sglang.cli.json_output import add_json, print_json

RENDER_EPILOG = """\
Preview before a deploy: `pyinfra-sglang render --inventory INVENTORY --inventory-host NAME`
prints exactly the files that host would get (its unit, env and config files, a router host's
sglang-router unit, a multi-node member's --nnodes/--node-rank/--dist-init-addr), rendered by
the same functions the deploy calls, for the GPUs the inventory plans for (or those given
with --gpus and --arch), secrets masked. What the deploy would run on each host: pyinfra's
own dry run, `uv run pyinfra INVENTORY deploy/site.py --dry` (docs/roles.md).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    add_data(parser, "with --inventory: ")
    parser.add_argument(
        "--profile",
        type=profile_name,
        help="model profile, e.g. glm-5-nvfp4 (required without --inventory)",
    )
    parser.add_argument(
        "--gpus",
        type=at_most(MAX_GPUS, "GPUs per host"),
        help="GPUs per host (required without --inventory; with it: instead of those planned)",
    )
    parser.add_argument(
        "--arch",
        type=gpu_arch,
        help="GPU architecture, e.g. sm_120 (required with --gpus)",
    )
    parser.add_argument(
        "--sglang-version",
        type=release,
        help="SGLang release, e.g. 0.5.23 (required without --inventory)",
    )
    parser.add_argument(
        "--gpu-mem-gb",
        type=gigabytes,
        default=None,
        help="memory per GPU, GB (default: the largest GPU of --arch in data/gpus.toml)",
    )
    parser.add_argument(
        "--host",
        type=bind_address,
        default=None,
        help="IP address the server binds to, as sglang_host (default 127.0.0.1)",
    )
    parser.add_argument("--port", type=port, default=None, help="port (default 30000)")
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
        type=at_most(MAX_NODES, "nodes"),
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
        type=host_port,
        default=None,
        metavar="HOST:PORT",
        help="without --inventory: the first node's rendezvous address, the same on every node",
    )
    add_json(
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
    """What a host of the inventory's defaults would get, with the values the flags give:
    rendered by service_files_for, the deploy's own function, secrets masked."""
    from pyinfra_sglang.config import HostConfig, versioned_venv_path
    from pyinfra_sglang.config.releases_read import unread_release
    from pyinfra_sglang.serving import profiles
    from pyinfra_sglang.serving.placement import NodePosition, place
    from pyinfra_sglang.serving.render import Secrets
    from pyinfra_sglang.serving.service_files import service_files_for

    profile = profiles.load_profile(args.profile, args.profile_dir)
    gpu_set, spec = _given_gpus(args)
    node = NodePosition(args.nnodes, args.node_rank, args.dist_init_addr)
    unread = unread_release(args.sglang_version, routed=False)
    if unread is not None:
        # A preview is not refused as a deploy would be: it says what it rendered with.
        print(f"render: warning: {unread.why}; {unread.accepted}", file=sys.stderr)
    if args.host is not None and not args.host.is_loopback:
        # The preview renders an API key (masked); a deploy to that bind requires one.
        print(
            f"render: --host {args.host} is not a loopback address: a deploy serves it only "
            "with an API key (sglang_api_key_file), which this preview renders masked",
            file=sys.stderr,
        )
    placement = place(profile, gpu_set, node, args.sglang_version)
    # The defaults, with what the flags say over them; not validated again, as the preview
    # accepts what a deploy would refuse (an unread release, a public bind) and says so.
    defaults = HostConfig()
    config = defaults.model_copy(
        update={
            "sglang_version": args.sglang_version,
            "sglang_model_profile": profile.name,
            "sglang_profile_dirs": list(args.profile_dir),
            "sglang_host": defaults.sglang_host if args.host is None else args.host,
            "sglang_port": args.port or defaults.sglang_port,
            "venv_path": args.venv
            or versioned_venv_path(
                args.sglang_version, defaults.python_version, defaults.cuda_version
            ),
        }
    )
    # Both secrets shown as set (masked): the preview has no key files to read.
    rendered = service_files_for(
        config, placement, Secrets(api_key="(set)", hf_token="(set)"), True
    )
    files = list(rendered.files)
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

    loaded = load_inventory("render", args.inventory, args.data)
    names = [host.name for host in loaded]
    if args.inventory_host not in names:
        raise Refused(
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


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from pyinfra.api.exceptions import PyinfraError

    from pyinfra_sglang import inventory

    problem = _render_mode_problem(args)
    if problem:
        print(f"render: {problem}", file=sys.stderr)
        return 2
    try:
        preview = _render_from_inventory(args) if args.inventory else _render_from_flags(args)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.status
    except inventory.InventoryError as error:
        return invalid(args, error)
    except PyinfraError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 1
    if args.json:
        print_json(
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
