"""The SGLang service as a host should hold it: which files, where, how it is reached.

A pure function of the inventory (``HostConfig``), the node's GPUs (the NvidiaGpus fact's
rows), its position in a multi-node group and the secrets: the service role renders with it,
the audit compares the host against it, and tests call it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyinfra.api.exceptions import OperationError

from pyinfra_sglang import data
from pyinfra_sglang.gpus import arch_from_compute_cap, find_gpu
from pyinfra_sglang.inventory import HostConfig, host_profile
from pyinfra_sglang.nvidia import cuda_paths
from pyinfra_sglang.render import (
    GpuSet,
    NodePosition,
    RenderedFile,
    Secrets,
    ServiceSpec,
    cache_dirs,
    render_router_unit,
    render_service_files,
)

UNIT_NAME = "sglang.service"
ROUTER_UNIT_PATH = "/etc/systemd/system/sglang-router.service"


class NoGpusError(OperationError):
    """The service cannot be sized: nvidia-smi reports no GPUs."""


class SecretFileError(OperationError):
    """A secret file on the controller is missing, unreadable or empty."""


@dataclass(frozen=True)
class ServiceFiles:
    unit_name: str
    files: tuple[RenderedFile, ...]
    health_url: str | None  # None: this node serves no HTTP (a multi-node rank > 0)
    start_timeout_s: int
    router_health_url: str | None = None  # the router in front of replicas, when configured
    stale: tuple[str, ...] = ()  # files of units no longer configured (a removed router)


def service_file_path(kind: str) -> str:
    """Where the service's ``unit``, ``env``, ``config`` or ``router_unit`` file lives."""
    return data.load("sglang_service")["files"][kind]["path"]


def cache_folders() -> list[str]:
    """The service's cache folders (model downloads, JIT caches), sorted."""
    return sorted(cache_dirs().values())


def server_url(config: HostConfig, port: int | None = None) -> str:
    """How the host reaches its own server (or, with ``port``, its router): a wildcard bind
    on loopback, an IPv6 address in brackets."""
    address = "127.0.0.1" if config.sglang_host.is_unspecified else str(config.sglang_host)
    host_part = f"[{address}]" if ":" in address else address
    return f"http://{host_part}:{port or config.sglang_port}"


def node_position(
    config: HostConfig, host_name: str, members: list[str], head_address: str | None
) -> NodePosition:
    """This host's place in its multi-node group: ``members`` in the group's order,
    ``head_address`` the first member's address (its ssh_hostname, else its name)."""
    if not config.sglang_multinode_group:
        return NodePosition()
    return NodePosition(
        nnodes=len(members),
        rank=members.index(host_name),
        dist_init_addr=f"{head_address}:{config.sglang_dist_init_port}",
    )


def gpu_topology_is_pcie_only(gpus: list[dict]) -> bool:
    """Several GPUs and none of them NVLinked, per the spec table (the audit measures it)."""
    specs = [find_gpu(gpu["name"] or "") for gpu in gpus]
    return len(gpus) > 1 and not any(spec and spec.nvlink for spec in specs)


def read_secret(path: Path | None, what: str, host_name: str) -> str | None:
    """A secret from a file on the controller, stripped; never logged."""
    if path is None:
        return None
    try:
        secret = Path(path).expanduser().read_text().strip()
    except OSError as error:
        raise SecretFileError(
            f"host {host_name}: cannot read {what} file {path}: {error.strerror}"
        ) from None
    if not secret:
        raise SecretFileError(f"host {host_name}: {what} file {path} is empty")
    return secret


def read_secrets(config: HostConfig, host_name: str) -> Secrets:
    return Secrets(
        api_key=read_secret(config.sglang_api_key_file, "API key", host_name),
        hf_token=read_secret(config.hf_token_file, "Hugging Face token", host_name),
    )


def gpu_set(gpus: list[dict], host_name: str) -> GpuSet:
    """The GPUs as rendering needs them, from the NvidiaGpus fact's rows."""
    if not gpus:
        raise NoGpusError(
            f"host {host_name}: nvidia-smi reports no GPUs; reboot into the installed driver "
            "(allow_reboot: true does it) before the SGLang service can be sized"
        )
    memory_mib = min(int((gpu["memory.total"] or "0").split()[0]) for gpu in gpus)
    return GpuSet(
        count=len(gpus),
        memory_gb=memory_mib / 1024,
        arch=arch_from_compute_cap(gpus[0]["compute_cap"] or ""),
        pcie_only=gpu_topology_is_pcie_only(gpus),
    )


def service_files(
    config: HostConfig,
    host_name: str,
    gpus: list[dict],
    node: NodePosition,
    secrets: Secrets,
) -> ServiceFiles:
    """The unit, env and config (and the router's unit) for this host; GpuFitError and
    friends when the profile cannot run here."""
    profile = host_profile(config)
    spec = ServiceSpec(
        profile=profile,
        sglang_version=config.sglang_version,
        gpus=gpu_set(gpus, host_name),
        host=str(config.sglang_host),
        port=config.sglang_port,
        venv_path=config.venv_path,
        secrets=secrets,
        cuda_home=cuda_paths(config.cuda_version)["home"],
        node=node,
    )
    files = render_service_files(spec)
    routed = bool(config.sglang_router_worker_urls)
    if routed:
        worker_urls = [str(url).rstrip("/") for url in config.sglang_router_worker_urls]
        router_unit = render_router_unit(
            config.venv_path, worker_urls, str(config.sglang_host), config.sglang_router_port
        )
        files.append(RenderedFile(ROUTER_UNIT_PATH, router_unit, "644"))
    router_health = f"{server_url(config, config.sglang_router_port)}/health"
    return ServiceFiles(
        unit_name=UNIT_NAME,
        files=tuple(files),
        health_url=f"{server_url(config)}/health" if node.rank == 0 else None,
        start_timeout_s=profile.start_timeout_s,
        router_health_url=router_health if routed else None,
        stale=() if routed else (ROUTER_UNIT_PATH,),
    )
