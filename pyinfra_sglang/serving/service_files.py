"""The SGLang service as a host should hold it: which files, where, how it is reached.

A pure function of the inventory (``HostConfig``), the node's GPUs (the NvidiaGpus fact's
rows, or the GPUs the inventory plans for when the host cannot be read yet), its position in
a multi-node group and the secrets: the service role renders with it, the audit compares the
host against it, validation renders it before any host changes, and tests call it directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyinfra.api.exceptions import OperationError

from pyinfra_sglang import data
from pyinfra_sglang.arch import as_sm
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.driver.nvidia import cuda_paths
from pyinfra_sglang.gpu_links.p2p import PeerPath
from pyinfra_sglang.gpus import (
    GpuSpec,
    find_gpu,
    gpu_by_name,
    known_archs,
    largest_gpu_of_arch,
)
from pyinfra_sglang.model_files.model_snapshot import is_local_model
from pyinfra_sglang.parsers.topo import topology_has_nvlink, widest_pcie_path
from pyinfra_sglang.serving import memory_fit
from pyinfra_sglang.serving.host_profile import host_profile
from pyinfra_sglang.serving.placement import (
    GpuSet,
    NodePosition,
    Placement,
    fewest_gpus_for,
    place,
)
from pyinfra_sglang.serving.profiles import Profile
from pyinfra_sglang.serving.render import (
    RenderedFile,
    RenderError,
    RouterSpec,
    Secrets,
    ServiceSpec,
    cache_dirs,
    render_router_files,
    render_service_files,
    router_env_path,
)
from pyinfra_sglang.serving.secret_files import (
    read_secret,
)
from pyinfra_sglang.versions import parse_version

# The unit's name and the router unit's path, as data/sglang_service.toml [files] has them.
UNIT_NAME = Path(data.sglang_service().files.unit.path).name
ROUTER_UNIT_PATH = data.sglang_service().files.router_unit.path


class NoGpusError(OperationError):
    """The service cannot be sized: nvidia-smi reports no GPUs."""


@dataclass(frozen=True)
class ServiceFiles:
    unit_name: str
    files: tuple[RenderedFile, ...]
    health_url: str | None  # None: this node serves no HTTP (a multi-node rank > 0)
    start_timeout_s: int
    router_health_url: str | None = None  # the router in front of replicas, when configured
    stale: tuple[str, ...] = ()  # files of units no longer configured (a removed router)
    # Servers behind one router restart `rolling_batch` at a time (roles/service_apply.py).
    rolling_group: str | None = None
    rolling_batch: int = 1
    # The members of a multi-node group come up together or all roll back.
    multinode_group: str | None = None
    # This node's rank, the group's hosts in rank order, rank 0's health URL (as rank 0
    # reaches it) and whether the release needs rank 0 stopped first (rank0_stops_first).
    node_rank: int = 0
    group_hosts: tuple[str, ...] = ()
    rank0_health_url: str | None = None
    rank0_first: bool = False


def service_file_path(kind: str) -> str:
    """Where the service's ``unit``, ``env``, ``config`` or ``router_unit`` file lives."""
    return data.sglang_service().files.of(kind).path


def cache_folders() -> list[str]:
    """The service's cache folders (model downloads, JIT caches), sorted."""
    return sorted(cache_dirs().values())


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def server_url(config: HostConfig, port: int | None = None) -> str:
    """How the host reaches its own server: a wildcard bind on loopback, an IPv6 address in
    brackets. With ``port``, the same address and that port."""
    address = "127.0.0.1" if config.sglang_host.is_unspecified else str(config.sglang_host)
    return f"http://{_url_host(address)}:{port or config.sglang_port}"


def router_url(config: HostConfig) -> str:
    """How the host reaches its own router (on its own bind address)."""
    bind = config.router_bind()
    address = "127.0.0.1" if bind.is_unspecified else str(bind)
    return f"http://{_url_host(address)}:{config.sglang_router_port}"


def router_requirements(sglang_version: str) -> dict[str, str]:
    """The router's package (sglang-router, or smg from SGLang 0.5.9) and its release pinned
    for ``sglang_version`` (data/python.toml [router]), as {package: version}; RenderError
    when no release is pinned for it."""
    pins = data.python().router.pins
    version = parse_version(sglang_version)
    pinned = [pin for pin in pins if parse_version(pin.sglang) <= version]
    if not pinned:
        oldest = pins[0]
        raise RenderError(
            f"no router release is pinned for SGLang {sglang_version} (pins start at SGLang "
            f"{oldest.sglang} with {oldest.package} {oldest.router}, "
            "pyinfra_sglang/data/python.toml [router]): pin a newer SGLang release, or add the "
            "router release that goes with it",
            "sglang_version",
        )
    latest = max(pinned, key=lambda pin: parse_version(pin.sglang))
    return {latest.package: latest.router}


def rank0_stops_first(sglang_version: str) -> bool:
    """Whether a multi-node group of this SGLang release must stop rank 0 before the other
    ranks, which from then on wait for its shutdown broadcast (data/sglang_service.toml
    [multinode])."""
    boundary = data.sglang_service().multinode.rank0_stops_first_from
    return parse_version(sglang_version) >= parse_version(boundary)


def node_position(
    config: HostConfig, host_name: str, members: list[str], head_address: str | None
) -> NodePosition:
    """This host's place in its multi-node group: ``members`` in the group's order,
    ``head_address`` the first member's address (its ssh_hostname, else its name); an IPv6
    address goes in brackets (``[fd00::1]:50000``)."""
    if not config.sglang_multinode_group:
        return NodePosition()
    return NodePosition(
        nnodes=len(members),
        rank=members.index(host_name),
        dist_init_addr=f"{_url_host(str(head_address))}:{config.sglang_dist_init_port}",
    )


def gpu_topology_is_pcie_only(gpus: list[dict]) -> bool:
    """Several GPUs and none of them NVLinked, per the spec table (the audit measures it)."""
    specs = [find_gpu(gpu["name"] or "") for gpu in gpus]
    return len(gpus) > 1 and not any(spec and spec.nvlink for spec in specs)


# --- secrets -----------------------------------------------------------------------------


def read_secrets(
    config: HostConfig, host_name: str, warn: Callable[[str], None] | None = None
) -> Secrets:
    """Every secret the host's service needs, read from the controller's files."""
    return Secrets(
        api_key=read_secret(config.sglang_api_key_file, "sglang_api_key_file", host_name, warn),
        hf_token=read_secret(config.hf_token_file, "hf_token_file", host_name, warn),
        router_api_key=read_secret(
            config.sglang_router_api_key_file, "sglang_router_api_key_file", host_name, warn
        ),
    )


def masked_secrets(config: HostConfig) -> Secrets:
    """Stand-ins for the secrets the inventory names (rendered masked, never read)."""
    mark = "(set)"
    return Secrets(
        api_key=mark if config.sglang_api_key_file else None,
        hf_token=mark if config.hf_token_file else None,
        router_api_key=mark if config.sglang_router_api_key_file else None,
    )


# --- GPUs --------------------------------------------------------------------------------


def gpu_set(
    gpus: list[dict],
    host_name: str,
    topology: dict[str, dict[str, str]] | None = None,
    peer: PeerPath | None = None,
) -> GpuSet:
    """The GPUs as rendering needs them, from the NvidiaGpus fact's rows and, when read, the
    NvidiaTopology fact's matrix (which tells NVLink and the widest PCIe path for NCCL) and
    what the host allows for peer traffic (``peer``: whether NCCL may use P2P)."""
    if not gpus:
        raise NoGpusError(
            f"host {host_name}: nvidia-smi reports no GPUs; reboot into the installed driver "
            "(allow_reboot: true does it) before the SGLang service can be sized"
        )
    memory_mib = min(int((gpu["memory.total"] or "0").split()[0]) for gpu in gpus)
    return GpuSet(
        count=len(gpus),
        memory_gb=memory_mib / 1024,
        arch=as_sm(gpus[0]["compute_cap"]),
        pcie_only=(
            len(gpus) > 1 and not topology_has_nvlink(topology)
            if topology
            else gpu_topology_is_pcie_only(gpus)
        ),
        widest_path=widest_pcie_path(topology) if topology else None,
        peer=peer,
    )


def planned_gpu(profile: Profile, model: str | None = None) -> GpuSpec | None:
    """The GPU a host is assumed to have before it can be read: ``model`` (the inventory's
    expected_gpu_model) when set; else the largest (most memory) of the profile's
    architectures in data/gpus.toml, of any architecture when the profile names none; None
    when the table has none of them."""
    if model:
        return gpu_by_name(model)
    archs = [arch for arch in (profile.archs or known_archs()) if arch in known_archs()]
    if not archs:
        return None
    candidates = [largest_gpu_of_arch(arch) for arch in archs]
    return min(candidates, key=lambda s: (-s.memory_gb, -s.memory_bandwidth_gbs, s.name))


def _heads_split_over(profile: Profile, count: int, nnodes: int) -> int:
    """``count`` GPUs a node, raised until tensor parallelism can use all of them over the
    ``nnodes`` nodes (a count the model's heads split over, the same on every node): the
    fewest that hold a model (3 x 180 GB for GLM-5) may be a count no host is built with."""
    total = fewest_gpus_for(profile, None, count * nnodes)
    while total is not None and total % nnodes:
        total = fewest_gpus_for(profile, None, total + 1)
    return count if total is None else total // nnodes


def planned_gpus(config: HostConfig, profile: Profile, nnodes: int = 1) -> GpuSet:
    """The GPUs the inventory plans for one node: ``expected_gpu_count`` (unset: the fewest
    that hold the profile over ``nnodes`` nodes at a count its heads split over, and at least
    its tp_size) of planned_gpu."""
    spec = planned_gpu(profile, config.expected_gpu_model)
    memory_gb = spec.memory_gb if spec else None
    count = config.expected_gpu_count
    if count is None:
        # The fewest GPUs over all nodes that hold the model on that GPU (memory_fit.py) at a
        # tensor-parallel size its heads allow, per node.
        fitted = profile.for_arch(spec.arch) if spec else profile
        total = fewest_gpus_for(fitted, memory_gb) if memory_gb else 1
        count = max(1, math.ceil((total or 1) / nnodes))
        if profile.tp_size is not None:
            count = max(count, math.ceil(profile.tp_size / nnodes))
        else:
            count = _heads_split_over(profile, count, nnodes)
    if memory_gb is None:
        # No GPU of the profile's architectures in the table: assume they hold it.
        memory_gb = memory_fit.gpu_memory_needed(profile, count * nnodes)
    arch = spec.arch if spec else (profile.archs[0] if profile.archs else None)
    return GpuSet(
        count=count,
        memory_gb=memory_gb,
        arch=arch,
        pcie_only=count > 1 and spec is not None and not spec.nvlink,
    )


# --- the files ---------------------------------------------------------------------------


def host_placement(
    config: HostConfig,
    host_name: str,
    gpus: list[dict],
    node: NodePosition,
    topology: dict[str, dict[str, str]] | None = None,
    peer: PeerPath | None = None,
) -> Placement:
    """Where the host's profile runs on the GPUs found on it (the NvidiaGpus fact's rows;
    the topology and peer path where read): the one Placement the service, the benchmark
    record and the tuner use."""
    gpu_rows = gpu_set(gpus, host_name, topology, peer)
    return place(host_profile(config), gpu_rows, node, config.sglang_version)


def service_files(
    config: HostConfig,
    host_name: str,
    gpus: list[dict],
    node: NodePosition,
    secrets: Secrets,
    topology: dict[str, dict[str, str]] | None = None,
    peer: PeerPath | None = None,
    interface: str | None = None,
) -> ServiceFiles:
    """The unit, env and config (and the router's files) for this host and the GPUs found
    on it; GpuFitError and friends when the profile cannot run here. ``interface``: the one
    a multi-node member routes to the others through."""
    placement = host_placement(config, host_name, gpus, node, topology, peer)
    return service_files_for(config, placement, secrets, interface=interface)


def multinode_interface_env(config: HostConfig, found: str | None = None) -> dict[str, str]:
    """A multi-node member's bootstrap interface as Gloo and NCCL read it (data/
    sglang_service.toml [environment.multinode_interface]): sglang_multinode_interface, else
    ``found`` (the interface the host routes to the other members through); {} outside a
    group or when neither is known."""
    interface = config.sglang_multinode_interface or found
    if not config.sglang_multinode_group or not interface:
        return {}
    template = data.sglang_service().environment.multinode_interface
    return {name: value.format(interface=interface) for name, value in template.items()}


def service_files_for(
    config: HostConfig,
    placement: Placement,
    secrets: Secrets,
    mask: bool = False,
    interface: str | None = None,
) -> ServiceFiles:
    """service_files for a Placement (on the GPUs found, or those planned); ``mask`` prints
    the mask in place of each secret; ``interface``: the one a multi-node member routes to
    the others through, when read from the host."""
    profile = placement.profile
    spec = ServiceSpec(
        placement=placement,
        host=str(config.sglang_host),
        port=config.sglang_port,
        venv_path=config.venv_path,
        secrets=secrets,
        cuda_home=cuda_paths(config.cuda_version)["home"],
        mask=mask,
        # A Hub model is served from the snapshot the model role downloaded (roles/model.py).
        model_revision=(
            None
            if is_local_model(profile.model)
            else config.sglang_model_revision or profile.revision
        ),
        offline=not is_local_model(profile.model),
        hub_cache=config.sglang_model_cache_dir,
        # sglang_env wins over the derived interface, as over every other hint.
        host_env={**multinode_interface_env(config, interface), **config.sglang_env},
    )
    files = render_service_files(spec)
    routed = bool(config.sglang_router_worker_urls)
    stale: tuple[str, ...] = (ROUTER_UNIT_PATH, router_env_path())
    if routed:
        ((gateway, release),) = router_requirements(config.sglang_version).items()
        router = RouterSpec(
            worker_urls=tuple(str(url).rstrip("/") for url in config.sglang_router_worker_urls),
            host=str(config.router_bind()),
            port=config.sglang_router_port,
            metrics_host=str(config.router_metrics_bind()),
            metrics_port=config.sglang_router_metrics_port,
            venv_path=config.venv_path,
            api_key=secrets.router_api_key,
            mask=mask,
            package=gateway,
            release=release,
        )
        router_files = render_router_files(router)
        files += router_files
        stale = tuple(path for path in stale if path not in {f.path for f in router_files})
    return ServiceFiles(
        unit_name=UNIT_NAME,
        files=tuple(files),
        health_url=f"{server_url(config)}/health" if placement.node.rank == 0 else None,
        start_timeout_s=profile.start_timeout_s,
        router_health_url=f"{router_url(config)}/health" if routed else None,
        stale=stale,
    )


def planned_placement(
    config: HostConfig, node: NodePosition, profile: Profile | None = None
) -> Placement:
    """The Placement on the GPUs the inventory plans for (planned_gpus), before the host can
    be read; ``profile``: the host's profile when the caller has it."""
    profile = profile or host_profile(config)
    gpus = planned_gpus(config, profile, node.nnodes)
    return place(profile, gpus, node, config.sglang_version)


def planned_service_files(
    config: HostConfig, node: NodePosition, profile: Profile | None = None
) -> ServiceFiles:
    """The files the host will get, rendered before it can be read: the planned Placement,
    secrets masked. What validation renders for every host."""
    placement = planned_placement(config, node, profile)
    return service_files_for(config, placement, masked_secrets(config), True)
