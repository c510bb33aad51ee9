"""The model of pyinfra_sglang/data/sglang_service.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number, Release


class ServiceFile(DataModel):
    path: str
    mode: str


class ServiceFiles(DataModel):
    unit: ServiceFile
    env: ServiceFile
    config: ServiceFile
    router_unit: ServiceFile

    def of(self, kind: str) -> ServiceFile:
        """``unit``, ``env``, ``config`` or ``router_unit``; KeyError for another kind."""
        return {
            "unit": self.unit,
            "env": self.env,
            "config": self.config,
            "router_unit": self.router_unit,
        }[kind]


class ServiceUser(DataModel):
    name: str
    supplementary_groups: tuple[str, ...]


class UnitSettings(DataModel):
    restart_sec: int
    limit_nofile: int
    start_limit_burst: int


class Secrets(DataModel):
    mask: str


class Cache(DataModel):
    root: str
    dirs: dict[str, str]


class NcclP2pLevel(DataModel):
    default: str
    by_path: dict[str, str]


class NcclP2p(DataModel):
    disable: dict[str, str]
    disable_when: tuple[str, ...]
    allowed: dict[str, tuple[str, ...]]


class ServiceEnvironment(DataModel):
    system_path: tuple[str, ...]
    cache: Cache
    nccl_pcie_only: dict[str, str]
    multinode_interface: dict[str, str]
    nccl_p2p_level: NcclP2pLevel
    nccl_p2p: NcclP2p


class Multinode(DataModel):
    rank0_stops_first_from: Release


class Gateway(DataModel):
    module: str
    script: str
    subcommand: tuple[str, ...]
    grace_flag_from: Release


class ServiceRouter(DataModel):
    policy: str
    worker_urls_flag: str
    policy_flag: str
    host_flag: str
    port_flag: str
    prometheus_host_flag: str
    prometheus_port_flag: str
    api_key_flag: str
    api_key_variable: str
    worker_urls_variable: str
    env_path: str
    env_mode: str
    shutdown_grace_flag: str
    shutdown_grace_s: Number
    stop_margin_s: Number
    # Router package (python.toml router.pins package) -> how it is started.
    gateway: dict[str, Gateway]


class SglangService(DataModel):
    files: ServiceFiles
    service_user: ServiceUser
    unit: UnitSettings
    secrets: Secrets
    environment: ServiceEnvironment
    multinode: Multinode
    router: ServiceRouter
