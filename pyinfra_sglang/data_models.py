"""One validated model per data file (pyinfra_sglang/data/*.toml).

``data.py`` validates each file against its model when it first reads it, so a misspelt key,
a missing one or a value of the wrong type stops the run at load, naming the file and the key,
instead of a KeyError far from the data. Models are frozen; sequences are tuples. The code
uses these models as they are (a GPU's spec, a flag's spellings, a tuning setting), with no
mirror type: a table keyed by name (gpus.toml, tuning.toml [settings]) gets its key as
``name``.

How to add a key: add the field to the file's model below (with a default if older files may
lack it), then read it through the typed accessor in ``data.py`` (``data.nvidia().repo.x``).
How to add a file: a model here, an entry in ``MODELS``, an accessor in ``data.py``.
Cross-file references (a platform's family has package tables, a profile's arch is a known
GPU...) are checked in tests/unit/test_data_models.py.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel, model_validator

from pyinfra_sglang.arch import SmArch
from pyinfra_sglang.versions import Version, parse_version

# int stays int and float stays float (smart union): values keep the type TOML gave them.
Number = int | float


def _release(text: str) -> str:
    parse_version(text)
    return text


@cache
def _optional_version(text: str | None) -> Version | None:
    return parse_version(text) if text is not None else None


# An SGLang (or router) release, "0.5.17": checked readable, kept as written.
Release = Annotated[str, AfterValidator(_release)]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _named_by_key(tables: Any) -> Any:
    """Tables keyed by name, each given its key as ``name``: the file does not write it."""
    if not isinstance(tables, dict):
        return tables
    named = {}
    for key, table in tables.items():
        if isinstance(table, dict):
            if table.get("name", key) != key:
                raise ValueError(f"{key}: name {table['name']!r} is not the table's key")
            table = {**table, "name": key}
        named[key] = table
    return named


# --- apt.toml ----------------------------------------------------------------------------


class Apt(_Data):
    lock_timeout_s: int
    update_attempts: int
    update_retry_delay_s: int


# --- attention_backends.toml -------------------------------------------------------------


class SparseBackend(_Data):
    archs: tuple[SmArch, ...]
    source: str
    since: Release | None = None
    kv_cache_dtypes: tuple[str, ...] | None = None
    phases: tuple[Literal["prefill", "decode"], ...] = ("prefill", "decode")


class AttentionBackends(_Data):
    sparse: dict[str, SparseBackend]


# --- diagnosis.toml ----------------------------------------------------------------------


class DiagnosisBusy(_Data):
    gpu_util_pct: Number
    share: Number
    active_gpu_util_pct: Number


class DiagnosisCompute(_Data):
    min_mem_util_pct: Number
    min_power_fraction: Number
    max_clock_fraction: Number


class DiagnosisMemoryBandwidth(_Data):
    mem_util_pct: Number


class DiagnosisLink(_Data):
    saturated_fraction: Number
    share: Number
    idle_fraction: Number
    idle_gbs: Number


class DiagnosisHost(_Data):
    busy_process_cpu_pct: Number


class DiagnosisMemoryCapacity(_Data):
    kv_cache_usage: Number
    queued_requests: int


class DiagnosisBandwidth(_Data):
    low_fraction: Number


class DiagnosisLimits(_Data):
    max_file_bytes: int
    max_json_depth: int
    max_samples: int
    max_gpus: int
    max_readings: int
    max_steps: int
    max_bench_rows: int
    max_concurrency: int
    max_journal_bytes: int
    max_journal_rounds: int
    max_number: Number


class DiagnosisServer(_Data):
    kv_full: Number
    cached_share: Number
    growth_min: Number


class Diagnosis(_Data):
    busy: DiagnosisBusy
    compute: DiagnosisCompute
    memory_bandwidth: DiagnosisMemoryBandwidth
    link: DiagnosisLink
    host: DiagnosisHost
    memory_capacity: DiagnosisMemoryCapacity
    bandwidth: DiagnosisBandwidth
    limits: DiagnosisLimits
    server: DiagnosisServer


# --- gpus.toml ---------------------------------------------------------------------------


class Gpu(_Data):
    """One GPU model; ``name`` is its key in gpus.toml, as nvidia-smi prints it."""

    name: str
    arch: SmArch
    memory_gb: Number
    memory_bandwidth_gbs: Number
    pcie_gen: int
    nvlink: bool
    nvlink_bandwidth_gbs: Number
    # Dense (no sparsity) bf16 tensor rate, TFLOP/s: the prefill (compute) roofline.
    dense_bf16_tflops: Number | None = None


class Gpus(RootModel[dict[str, Gpu]]):
    """GPU name as nvidia-smi prints it -> its numbers."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, values: Any) -> Any:
        return _named_by_key(values)


# --- memory_fit.toml ---------------------------------------------------------------------


class MemoryFitMtp(_Data):
    draft_overhead_gb: Number


class MemoryFit(_Data):
    unset_mem_fraction_static: Number
    mtp: MemoryFitMtp


# --- model.toml --------------------------------------------------------------------------


class DiskMargin(_Data):
    fraction: Number
    min_gb: Number


class ModelDownload(_Data):
    unit: str
    program_dir: str
    env_file: str
    log: str
    sandbox: tuple[str, ...]
    log_every_s: Number
    print_every_s: Number
    environment: dict[str, str]


class CacheDirRules(_Data):
    system_trees: tuple[str, ...]
    dedicated_roots: tuple[str, ...]
    shared_parents: tuple[str, ...]


class Model(_Data):
    api_timeout_s: Number
    audit_api_timeout_s: Number
    cache_dir: CacheDirRules
    disk_margin: DiskMargin
    download: ModelDownload


# --- multinode_firewall.toml -------------------------------------------------------------


class MultinodeFirewall(_Data):
    table: str
    dist_init_port_span: int
    ephemeral_ports: tuple[int, int]
    rules_path: str
    unit_name: str
    unit_path: str
    sysctl_path: str


# --- nvidia.toml -------------------------------------------------------------------------

Flavor = Literal["open", "proprietary"]
# A driver package: one name, or [name from R590, name for R580 and before].
DriverPackage = str | tuple[str, str]


class BranchSupport(_Data):
    branch: int
    support: Literal["long-term", "production", "feature"]
    on_matrix: bool
    end_of_support: str | None = None


class CudaDriverMinimum(_Data):
    release: str
    update: str
    driver: str


class NvidiaRepo(_Data):
    base_url: str
    keyring_package: str
    keyring_deb: str
    keyring_path: str
    list_path: str
    download_dir: str
    signing_key_fingerprint: str
    keyring_deb_files: tuple[str, ...]
    auth_path: str
    mirror_extra_packages: tuple[str, ...]
    keyring_sha256: dict[str, str] = {}


class DriverArchitecture(_Data):
    from_arch: int
    name: str
    modules: tuple[Flavor, ...]
    min_branch: int | None = None
    max_branch: int | None = None
    sources: dict[str, str]


class FlavorPackages(_Data):
    open: tuple[DriverPackage, ...]
    proprietary: tuple[DriverPackage, ...]

    def of(self, flavor: str) -> tuple[DriverPackage, ...]:
        """The packages of ``flavor`` (nvidia_kernel_modules: "open" or "proprietary")."""
        return {"open": self.open, "proprietary": self.proprietary}[flavor]


class DriverInstallPackages(_Data):
    compute: FlavorPackages
    full: FlavorPackages

    def of(self, install: str) -> FlavorPackages:
        """The packages of ``install`` (nvidia_driver_install: "compute" or "full")."""
        return {"compute": self.compute, "full": self.full}[install]


class NvidiaDriver(_Data):
    pinning_package: str
    version_pinning_package: str
    branch_move_prefixes: tuple[str, ...]
    architectures: tuple[DriverArchitecture, ...]
    # Platform family (platforms.toml driver_family) -> install mode -> flavor -> packages.
    packages: dict[str, DriverInstallPackages]
    kernel_module_packages: dict[str, FlavorPackages]
    sources: dict[str, str]


class MokPaths(_Data):
    key: str
    cert: str


class SecureBoot(_Data):
    efi_variable: str
    mok: dict[str, MokPaths]


class Nouveau(_Data):
    blacklist_path: str


class CudaToolkit(_Data):
    toolkit_package: str
    home: str
    profile_script: str
    ld_conf: str


class SubnetManager(_Data):
    from_arch: int
    packages: tuple[str, ...]
    kernel_modules: tuple[str, ...]
    modules_load_path: str


class FabricManager(_Data):
    service: str
    nvswitch_pci_class: str
    attached_states: tuple[str, ...]
    unattached_states: tuple[str, ...]
    ready_state: str
    ready_status: str
    # Platform family (platforms.toml driver_family) -> candidate names, {branch} filled in.
    packages: dict[str, tuple[str, ...]]
    subnet_manager: tuple[SubnetManager, ...]


class Nvidia(_Data):
    driver_branches: tuple[int, ...]
    default_driver_branch: int
    cuda_versions: tuple[str, ...]
    default_cuda_version: str
    branch_support: tuple[BranchSupport, ...]
    cuda_driver_minimum: tuple[CudaDriverMinimum, ...]
    cuda_minor_version_compat: dict[str, int]
    repo: NvidiaRepo
    driver: NvidiaDriver
    secure_boot: SecureBoot
    nouveau: Nouveau
    cuda: CudaToolkit
    fabric_manager: FabricManager


# --- host_driver.toml --------------------------------------------------------------------


class DriverOrigin(_Data):
    archive_prefixes: tuple[str, ...]
    archive_name_patterns: tuple[str, ...]
    archive_revision_patterns: tuple[str, ...]
    runfile_markers: tuple[str, ...]


class HostToolkits(_Data):
    nvcc_glob: str


class HostDriver(_Data):
    origin: DriverOrigin
    toolkits: HostToolkits


# --- nvidia_smi.toml ---------------------------------------------------------------------


class QueryCsv(_Data):
    identity: tuple[str, ...]
    max_gpus_without_identity: int


class SmiQ(_Data):
    fields: dict[str, tuple[str, ...]]


class Topo(_Data):
    topology_cells: tuple[str, ...]
    p2p_cells: tuple[str, ...]


class NvidiaSmi(_Data):
    unreadable: tuple[str, ...]
    query_csv: QueryCsv
    smi_q: SmiQ
    topo: Topo


# --- dcgm.toml ---------------------------------------------------------------------------

DiagResult = Literal["Fail", "Warn", "Pass", "Skip"]


class DcgmDiag(_Data):
    levels: tuple[int, ...]
    default_level: int
    timeout_s: dict[str, int]
    results: tuple[DiagResult, ...]
    detail_rows: tuple[str, ...]

    @model_validator(mode="after")
    def _levels_consistent(self) -> DcgmDiag:
        if self.default_level not in self.levels:
            raise ValueError(f"default_level {self.default_level} is not in levels")
        if set(self.timeout_s) != {str(level) for level in self.levels}:
            raise ValueError("timeout_s must give one timeout per level")
        if sorted(self.results) != sorted(("Fail", "Warn", "Pass", "Skip")):
            raise ValueError("results must list Fail, Warn, Pass and Skip once each")
        return self


class DcgmInstall(_Data):
    packages: dict[str, str]  # CUDA major -> DCGM's package
    install_recommends: bool
    service: str


class Dcgm(_Data):
    diag: DcgmDiag
    install: DcgmInstall


# --- monitoring.toml ---------------------------------------------------------------------


class MetricRename(_Data):
    """A metric_relabel_configs rule of one job: names matching ``regex`` become
    ``replacement``."""

    job: str
    regex: str
    replacement: str


class MonitoringPrometheus(_Data):
    package: str
    service: str
    config: str
    rules: str
    defaults: str
    promtool: str
    port: int
    scrape_interval_s: int = Field(ge=1)
    evaluation_interval_s: int = Field(ge=1)
    staging: str
    renames: tuple[MetricRename, ...] = ()


class MonitoringNodeExporter(_Data):
    package: str
    service: str
    defaults: str
    port: int


class MonitoringDcgmExporter(_Data):
    package: str
    service: str
    unit: str
    binary: str
    counters: str
    dropin: str
    port: int
    default_counters: tuple[str, ...]
    optional_counters: tuple[str, ...]


class MonitoringFirewall(_Data):
    table: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    rules_path: str
    unit_name: str = Field(pattern=r"^[a-z0-9-]+\.service$")
    unit_path: str


class MonitoringGrafana(_Data):
    repo_url: str
    suite: str
    components: tuple[str, ...]
    key_url: str
    key_fingerprint: str = Field(pattern=r"^[0-9A-F]{40}$")
    keyring: str
    sources_list: str
    package: str
    service: str
    port: int
    provisioning: str
    dashboards_dir: str
    old_dashboard_paths: tuple[str, ...]
    password_file: str
    password_reset: tuple[str, ...]
    user: str
    dropin: str
    datasource_uid: str
    sglang_dashboard: str
    staging_dir: str
    sglang_dashboard_staging: str
    sglang_dashboard_source: str
    sglang_dashboard_url: str
    sglang_dashboard_metrics: tuple[str, ...] = ()


class MonitoringAlert(_Data):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    verdict: str
    expr: str
    per_cap: bool = False
    for_: str = Field(alias="for", pattern=r"^\d+[smh]$")
    severity: Literal["critical", "warning", "info"]
    summary: str
    action: str


class Monitoring(_Data):
    prometheus: MonitoringPrometheus
    node_exporter: MonitoringNodeExporter
    dcgm_exporter: MonitoringDcgmExporter
    firewall: MonitoringFirewall
    grafana: MonitoringGrafana
    alerts: tuple[MonitoringAlert, ...]

    @model_validator(mode="after")
    def _unique_alerts(self) -> Monitoring:
        names = [alert.name for alert in self.alerts]
        if len(names) != len(set(names)):
            raise ValueError("alerts: every alert needs a name of its own")
        return self


# --- gpu_health.toml ---------------------------------------------------------------------

HealthAction = Literal[
    "none", "restart-app", "restart-fm", "reset", "drain-reset", "reboot", "replace"
]


class XidEntry(_Data):
    code: int
    mnemonic: str
    meaning: str
    nvidia: str  # the catalogue's immediate resolution bucket
    action: HealthAction
    level: Literal["warn", "fail"]
    # The action when it is the only Xid read (the catalogue's "Solo" branch of a workflow).
    solo_action: HealthAction | None = None


class NvlinkHealth(_Data):
    error_counters: tuple[str, ...]


class ClockHealth(_Data):
    query: tuple[str, ...]
    min_share: float


class GpuHealth(_Data):
    actions: dict[HealthAction, str]
    xid: tuple[XidEntry, ...]
    xid_154: dict[str, HealthAction]
    smi_q: dict[str, tuple[tuple[str, ...], ...]]
    nvlink: NvlinkHealth
    clocks: ClockHealth

    @model_validator(mode="after")
    def _one_entry_per_xid(self) -> GpuHealth:
        codes = [entry.code for entry in self.xid]
        if len(codes) != len(set(codes)):
            raise ValueError("an Xid listed twice")
        return self


# --- parallelism.toml --------------------------------------------------------------------


class A2aChoices(_Data):
    since: Release
    backends: tuple[str, ...]


class A2a(_Data):
    not_nvidia: tuple[str, ...]
    choices: tuple[A2aChoices, ...]


class EpOneOrAll(_Data):
    quantization: str
    archs: tuple[SmArch, ...]


class ParallelismEstimate(_Data):
    activation_bytes: Number
    pcie_only_busbw_gbs: Number
    nvlink_share_of_table: Number


class Parallelism(_Data):
    a2a: A2a
    ep_one_or_all: tuple[EpOneOrAll, ...]
    estimate: ParallelismEstimate


# --- pcie.toml ---------------------------------------------------------------------------


class PcieGeneration(_Data):
    transfer_rate_gts: Number
    encoding: str


class Acs(_Data):
    redirect_flags: tuple[str, ...]


class PeerProbe(_Data):
    timeout_s: Number


class Pcie(_Data):
    # The file's tables [1] .. [6]: PCIe generation -> its rate and encoding.
    generations: dict[int, PcieGeneration]
    acs: Acs
    peer_probe: PeerProbe

    @model_validator(mode="before")
    @classmethod
    def _generations_are_numbered_tables(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        rest = {k: v for k, v in values.items() if not k.isdigit()}
        return {**rest, "generations": {k: v for k, v in values.items() if k.isdigit()}}


# --- platforms.toml ----------------------------------------------------------------------


class Platform(_Data):
    id: str
    version: str
    nvidia_repo: str
    components: tuple[str, ...]
    # The key of nvidia.toml's driver.packages, kernel_module_packages and secure_boot.mok.
    driver_family: str


class BasePackages(_Data):
    packages: tuple[str, ...]
    kernel_headers_package: str
    kernel_headers_metapackage: str
    unattended_upgrades_blacklist: tuple[str, ...]


class Platforms(_Data):
    platform: tuple[Platform, ...]
    arch: dict[str, str]
    base: BasePackages


# --- python.toml -------------------------------------------------------------------------


class Uv(_Data):
    version: str
    prefix: str


class Venv(_Data):
    root: str
    name: str
    keep: int
    python: str


class Torch(_Data):
    index_base: str
    # CUDA version (nvidia.toml cuda_versions) -> PyTorch's wheel tag.
    cuda_tag: dict[str, str]
    # Wheel tag -> the first torch release PyTorch built for it.
    first_release: dict[str, str]


class Kernel(_Data):
    index_base: str


class Stack(_Data):
    """What one SGLang release installs beside itself (read from its wheel)."""

    sglang: Release
    torch: str
    torchvision: str
    torchaudio: str
    kernel: str
    kernel_version: str
    kernel_cuda: int


class Stacks(_Data):
    stacks: tuple[Stack, ...]


class FlashAttn(_Data):
    version: str
    build_requirements: tuple[str, ...]
    gb_per_nvcc_thread: Number
    max_nvcc_threads: int
    default_cuda_archs: tuple[str, ...]
    memory_fraction: Number
    log_dir: str
    build_unit: str
    progress_every_s: Number
    poll_every_s: Number
    tail_lines: int


class RouterPin(_Data):
    sglang: Release
    package: str
    router: Release


class PythonRouter(_Data):
    pins: tuple[RouterPin, ...]


class Python(_Data):
    uv: Uv
    venv: Venv
    torch: Torch
    kernel: Kernel
    sglang: Stacks
    flash_attn: FlashAttn
    router: PythonRouter


# --- report.toml -------------------------------------------------------------------------


class ReportSteps(_Data):
    max_labels: int


class PanelSeries(_Data):
    label: str
    scale: Number
    field: str | None = None
    counter: str | None = None

    @model_validator(mode="after")
    def _field_or_counter(self) -> PanelSeries:
        if (self.field is None) == (self.counter is None):
            raise ValueError("a series reads one field or one counter")
        return self


class PanelLimit(_Data):
    field: str
    label: str


class Panel(_Data):
    title: str
    unit: str
    series: tuple[PanelSeries, ...]
    top: Number | None = None
    min_top: Number | None = None
    capacity: str | None = None
    limit: PanelLimit | None = None


class Report(_Data):
    steps: ReportSteps
    panel: tuple[Panel, ...]


# --- sglang_bench.toml -------------------------------------------------------------------


class BenchModule(_Data):
    name: str
    since: Release | None = None
    until: Release | None = None


class BenchRun(_Data):
    backend: str
    dataset: str
    range_ratio: Number
    min_prompts: int
    timeout_s: Number
    sample_interval_s: Number


class ServerMetricNames(_Data):
    """The /metrics series the poller records, per release range (names as the wheels
    declare them)."""

    since: Release | None = None
    until: Release | None = None
    gauges: dict[str, str]
    counters: dict[str, str] = {}


class SglangBench(_Data):
    module: tuple[BenchModule, ...]
    run: BenchRun
    server_metrics: tuple[ServerMetricNames, ...]


# --- sglang_flags.toml -------------------------------------------------------------------


class FlagSpelling(_Data):
    flag: str
    since: Release | None = None
    until: Release | None = None

    def exists_in(self, version: Version) -> bool:
        since, until = _optional_version(self.since), _optional_version(self.until)
        return (since is None or since <= version) and (until is None or version < until)

    def describe(self) -> str:
        since = f"from {parse_version(self.since)}" if self.since else "in every known release"
        until = f" until {parse_version(self.until)} (excluded)" if self.until else ""
        return f"{self.flag} {since}{until}"


class Flag(_Data):
    """One intent (a server setting) and how each SGLang release spells it."""

    intent: str
    kind: Literal["value", "switch"]
    spellings: tuple[FlagSpelling, ...]

    def flag_in(self, version: Version) -> str | None:
        """The newest spelling that exists in ``version``; None where none does."""
        present = [s for s in self.spellings if s.exists_in(version)]
        if not present:
            return None
        return max(present, key=lambda s: _optional_version(s.since) or Version(0, 0, 0)).flag


class FlagVersions(_Data):
    oldest_read: Release
    newest_read: Release
    router_pins_read: Release


class DpAttention(_Data):
    switch_with: str


class Mtp(_Data):
    algorithm: str
    eagle_topk: int


class SglangFlags(_Data):
    versions: FlagVersions
    flag: tuple[Flag, ...]
    dp_attention: DpAttention
    mtp: Mtp

    @model_validator(mode="after")
    def _one_entry_per_intent(self) -> SglangFlags:
        intents = [f.intent for f in self.flag]
        duplicates = sorted({i for i in intents if intents.count(i) > 1})
        if duplicates:
            raise ValueError(f"intents listed twice: {', '.join(duplicates)}")
        return self


# --- sglang_service.toml -----------------------------------------------------------------


class ServiceFile(_Data):
    path: str
    mode: str


class ServiceFiles(_Data):
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


class ServiceUser(_Data):
    name: str
    supplementary_groups: tuple[str, ...]


class UnitSettings(_Data):
    restart_sec: int
    limit_nofile: int
    start_limit_burst: int


class Secrets(_Data):
    mask: str


class Cache(_Data):
    root: str
    dirs: dict[str, str]


class NcclP2pLevel(_Data):
    default: str
    by_path: dict[str, str]


class NcclP2p(_Data):
    disable: dict[str, str]
    disable_when: tuple[str, ...]
    allowed: dict[str, tuple[str, ...]]


class ServiceEnvironment(_Data):
    system_path: tuple[str, ...]
    cache: Cache
    nccl_pcie_only: dict[str, str]
    nccl_p2p_level: NcclP2pLevel
    nccl_p2p: NcclP2p


class Multinode(_Data):
    rank0_stops_first_from: Release


class Gateway(_Data):
    module: str
    script: str
    subcommand: tuple[str, ...]
    grace_flag_from: Release


class ServiceRouter(_Data):
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


class SglangService(_Data):
    files: ServiceFiles
    service_user: ServiceUser
    unit: UnitSettings
    secrets: Secrets
    environment: ServiceEnvironment
    multinode: Multinode
    router: ServiceRouter


# --- watchdog.toml -----------------------------------------------------------------------


class WatchdogUnits(_Data):
    service: str
    timer: str


class WatchdogProgram(_Data):
    dir: str
    main: str
    beside: tuple[str, ...]


class WatchdogState(_Data):
    directory: str
    file: str
    history: int


class WatchdogCheck(_Data):
    expect: str
    accuracy_s: int


class Watchdog(_Data):
    units: WatchdogUnits
    program: WatchdogProgram
    state: WatchdogState
    check: WatchdogCheck


# --- tuning.toml -------------------------------------------------------------------------


class TuningSearch(_Data):
    order: tuple[str, ...]
    max_rounds: int
    # A server verdict -> the settings tried first when the baseline's diagnosis names it.
    binds_first: dict[str, tuple[str, ...]] = {}


class TuningSetting(_Data):
    """One profile field the tuner varies (``name``, its key in [settings]). ``requires``:
    other fields' values it only makes sense with (a graph batch size needs CUDA graphs on);
    ``min_sglang_version`` and ``archs`` (CUDA architectures such as ``sm_90``): where it
    applies at all; ``profile_fields``: the profile must set these (expert parallelism needs
    a model with routed experts); ``divides_gpus``: only values that divide the host's GPU
    count (a parallel size)."""

    name: str
    values: tuple[bool | int | float | str, ...]
    profile_fields: tuple[str, ...] = ()
    divides_gpus: bool = False
    requires: dict[str, bool | int | float | str] = {}
    min_sglang_version: Release | None = None
    archs: tuple[SmArch, ...] = ()

    def applies(self, sglang_version: str, arch: str) -> bool:
        if self.min_sglang_version and parse_version(sglang_version) < parse_version(
            self.min_sglang_version
        ):
            return False
        return not self.archs or arch in self.archs

    def allowed_with(self, settings: dict[str, Any]) -> bool:
        return all(settings.get(name) == value for name, value in self.requires.items())


class Tuning(_Data):
    search: TuningSearch
    settings: dict[str, TuningSetting]

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, values: Any) -> Any:
        if isinstance(values, dict) and "settings" in values:
            return {**values, "settings": _named_by_key(values["settings"])}
        return values


# File name (without .toml) -> its model.
MODELS: dict[str, type[BaseModel]] = {
    "apt": Apt,
    "attention_backends": AttentionBackends,
    "diagnosis": Diagnosis,
    "dcgm": Dcgm,
    "gpu_health": GpuHealth,
    "gpus": Gpus,
    "host_driver": HostDriver,
    "memory_fit": MemoryFit,
    "model": Model,
    "monitoring": Monitoring,
    "multinode_firewall": MultinodeFirewall,
    "nvidia": Nvidia,
    "nvidia_smi": NvidiaSmi,
    "parallelism": Parallelism,
    "pcie": Pcie,
    "platforms": Platforms,
    "python": Python,
    "report": Report,
    "sglang_bench": SglangBench,
    "sglang_flags": SglangFlags,
    "sglang_service": SglangService,
    "tuning": Tuning,
    "watchdog": Watchdog,
}
