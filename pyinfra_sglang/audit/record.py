"""What the audit read from a host, and what the inventory expects of it: typed records the
judge (audit/judge.py) turns into findings without touching a host.

Both go into the JSON report under ``record``, so a report can be judged again later (the
tests re-judge real reports from the H200 machine and compare the whole report).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from pyinfra_sglang import data
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.driver.nvidia import cuda_paths
from pyinfra_sglang.gpu_links.p2p import P2P_KEYS
from pyinfra_sglang.monitoring.render import listen
from pyinfra_sglang.serving.flash_attn_need import FlashAttnNeed, as_set
from pyinfra_sglang.serving.service_files import ROUTER_UNIT_PATH


def monitoring_url(config: HostConfig) -> str | None:
    """The Prometheus API of a monitoring server, as the host itself reaches it."""
    if config.monitoring_role != "server":
        return None
    address = config.monitoring_listen_address
    bare = "127.0.0.1" if address.is_unspecified else str(address)
    return f"http://{listen(bare, data.monitoring().prometheus.port)}"


@dataclass(frozen=True)
class AuditExpectations:
    """What the inventory says the host should hold."""

    driver_branch: int
    kernel_modules: str  # "open" or "proprietary"
    cuda_version: str
    nvcc_path: str
    expected_gpu_count: int | None
    sglang_version: str
    venv_path: str
    unit_name: str
    node_rank: int  # 0 serves HTTP; other ranks of a multi-node group do not
    router_unit: str | None  # the router's unit name when the inventory configures one
    # Does the inventory move the driver within its branch? (Recorded before: no.)
    update_within_branch: bool = False
    # flash-attn's pin and the inventory's architectures for it (None in records made before).
    flash_attn_version: str | None = None
    flash_attn_cuda_archs: list[str] | None = None
    # Is flash-attn built here (flash_attn_build, else by need)? Records made before: it was.
    flash_attn_build: bool = True
    # Why it is not (serving/flash_attn_need.py); None in records made before.
    flash_attn_off_reason: str | None = None
    # The inventory's expected_gpu_model (None: unset, or a record made before it).
    expected_gpu_model: str | None = None
    # NCCL_P2P_LEVEL / NCCL_P2P_DISABLE as the host's sglang_env sets them ({}: left to the
    # host's reading; pyinfra_sglang/gpu_links/p2p.py).
    nccl_p2p_env: dict[str, str] = field(default_factory=dict)
    # The exact driver release the inventory locks (nvidia_driver_version); None: the branch.
    driver_version: str | None = None
    # nvidia_driver_source: "host" judges the host's own driver and toolkits as expected.
    # Records made before: "managed".
    driver_source: str = "managed"
    # sglang_watchdog: is the watchdog expected here? Records made before: no.
    watchdog: bool = False
    # The Prometheus API this host serves as the monitoring server (monitoring_role =
    # "server"); None elsewhere and in records made before.
    monitoring_url: str | None = None

    @classmethod
    def from_config(
        cls,
        config: HostConfig,
        unit_name: str,
        node_rank: int,
        flash_attn: FlashAttnNeed | None = None,
    ) -> AuditExpectations:
        """``flash_attn``: whether flash-attn is built here and why (unset: as the inventory's
        flash_attn_build says; built where it leaves it to need, as records made before)."""
        if flash_attn is None:
            flash_attn = as_set(config.flash_attn_build is not False)
        routed = bool(config.sglang_router_worker_urls)
        return cls(
            driver_branch=config.nvidia_driver_branch,
            kernel_modules=config.nvidia_kernel_modules,
            driver_version=config.nvidia_driver_version,
            driver_source=config.nvidia_driver_source,
            cuda_version=config.cuda_version,
            nvcc_path=cuda_paths(config.cuda_version)["nvcc"],
            expected_gpu_count=config.expected_gpu_count,
            sglang_version=config.sglang_version,
            venv_path=config.venv_path,
            unit_name=unit_name,
            update_within_branch=config.nvidia_driver_update_within_branch,
            flash_attn_version=config.flash_attn_version,
            flash_attn_cuda_archs=config.flash_attn_cuda_archs,
            flash_attn_build=flash_attn.build,
            flash_attn_off_reason=None if flash_attn.build else flash_attn.why,
            expected_gpu_model=config.expected_gpu_model,
            nccl_p2p_env={k: v for k, v in config.sglang_env.items() if k in P2P_KEYS},
            node_rank=node_rank,
            watchdog=config.sglang_watchdog,
            monitoring_url=monitoring_url(config),
            router_unit=ROUTER_UNIT_PATH.rsplit("/", 1)[1] if routed else None,
        )


@dataclass(frozen=True)
class GpuLoadReading:
    """The GPUs' ``--query-gpu`` samples and the load they were read under."""

    kind: str = "none"  # "decode", "probe", "copy" or "none" (read idle)
    samples: list[list[dict]] = field(default_factory=list)
    decode: dict | None = None  # decode_client.py's result, when the prompt ran
    probe: dict | None = None  # the probe's JSON (link_probe.py or copy_load.py)
    probe_failure: str | None = None  # why the link probe failed, when it did
    # The clock event reasons sampled while the load ran (--query-gpu rows per sample, the
    # reasons of data/gpu_health.toml [clocks]); []: not read (records made before).
    clock_reasons: list[list[dict]] = field(default_factory=list)


@dataclass(frozen=True)
class UnitFiles:
    """The service files' sha256 digests: as the inventory renders them and on the host.
    Contents are never recorded: the env and config files hold secrets."""

    expected: dict[str, str] = field(default_factory=dict)
    current: dict[str, str | None] = field(default_factory=dict)
    problem: str | None = None  # why the expected files could not be rendered


@dataclass(frozen=True)
class AuditFacts:
    """Everything the audit read from one host."""

    gpus: list[dict]  # NvidiaGpus rows, idle
    loaded_module: dict | None  # {"version", "flavor"}; flavor None when only nvidia-smi told
    installed_module: str | None  # the kernel module package's upstream version
    reboot_required: bool  # /run/reboot-required exists
    nvcc: dict | None
    virtualization: dict
    topology: dict[str, dict[str, str]]
    p2p: dict[str, dict[str, str]]
    iommu: dict
    persistenced: dict[str, str]
    service: dict[str, str]
    router_service: dict[str, str] | None
    sglang_version: str | None
    unit_files: UnitFiles | None  # None: no unit installed, or no GPU to size it for
    load: GpuLoadReading
    # Installed kernels and DKMS's NVIDIA builds (DkmsState); None in records made before.
    dkms: dict | None = None
    # The kernel module package's version apt would install now; None: not read, or none.
    module_candidate: str | None = None
    # SecureBootState: on or off, and the nvidia module's signer; None in records made before.
    secure_boot: dict | None = None
    # The package that installed nvidia-smi (dpkg -S); None: not read, or not a package's.
    nvidia_smi_package: str | None = None
    # The model's snapshot on the host (see checks/audit.read_model); None: not read.
    model: dict | None = None
    # flash-attn in the venv: {"installed": version, "built_archs": [...] or None (no record
    # names them)}; None: not read, or not installed.
    flash_attn: dict | None = None
    # NVIDIA display/3D controllers on the PCI bus (NvidiaPciDevices); None: not read.
    nvidia_pci_devices: int | None = None
    # ACS control of the bridges above each GPU (PcieAcs); None: not read (one GPU, or a
    # record made before).
    pcie_acs: dict | None = None
    # NVSwitch fabric (NvidiaFabric: nvswitches, per-GPU Fabric state), Fabric Manager's unit
    # state and installed package [name, version]; cuInit's result (CudaInit). None: not read.
    fabric: dict | None = None
    fabric_manager_service: dict | None = None
    fabric_manager_package: list | None = None
    cuda_init: dict | None = None
    # GPU health: the kernel log's Xid lines of this boot (KernelXids), the `nvidia-smi -q -d
    # ECC,ROW_REMAPPER,PAGE_RETIREMENT` rows (NvidiaMemoryHealth) and the NVLink error
    # counters (NvidiaNvlinkErrors). None: not read (records made before).
    kernel_xids: list | dict | None = None
    memory_health: list | None = None
    nvlink_errors: dict | None = None
    # `dcgmi diag -r <audit_dcgm_level>` (DcgmDiag): {"present", "level", "rc", "metadata",
    # "tests", "head"}, present false where dcgmi is not on PATH. None: not read (records
    # made before).
    dcgm_diag: dict | None = None
    # The audit's date, "YYYY-MM-DD" (the controller's clock when it read the host): driver
    # support is judged against it. None in records made before: not judged.
    audited_on: str | None = None
    # The watchdog: {"timer_unit", "timer": its SystemdUnitState, "state": its state file's
    # JSON or None}; None: not read (sglang_watchdog off, or a record made before).
    watchdog: dict | None = None
    # The monitoring server's Prometheus: {"url", "targets": its active targets or None when
    # it did not answer}; None: not read (not the monitoring host, or a record made before).
    monitoring: dict | None = None
    # A multi-node member's group network (parsers/group_network.py); None: not read (not a
    # member across machines, its interface not known, or a record made before).
    group_network: dict | None = None

    @classmethod
    def from_dict(cls, values: dict) -> AuditFacts:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in values.items() if key in known}
        unit_files = values.get("unit_files")
        return cls(
            **{
                **values,
                "unit_files": UnitFiles(**unit_files) if unit_files is not None else None,
                "load": GpuLoadReading(**values.get("load", {})),
            }
        )


def record_document(expectations: AuditExpectations, facts: AuditFacts) -> dict:
    return {"expectations": asdict(expectations), "facts": asdict(facts)}


def record_from_document(document: dict) -> tuple[AuditExpectations, AuditFacts]:
    return AuditExpectations(**document["expectations"]), AuditFacts.from_dict(document["facts"])
