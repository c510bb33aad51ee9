"""One validated model per data file (pyinfra_sglang/data/*.toml), one module per file
(data_models/<file>.py, what they share in base.py).

``data.py`` validates each file against its model when it first reads it, so a misspelt key,
a missing one or a value of the wrong type stops the run at load, naming the file and the key,
instead of a KeyError far from the data. Models are frozen; sequences are tuples. The code
uses these models as they are (a GPU's spec, a flag's spellings, a tuning setting), with no
mirror type: a table keyed by name (gpus.toml, tuning.toml [settings]) gets its key as
``name``.

How to add a key: add the field to the file's model (data_models/<file>.py; with a default
if older files may lack it), then read it through the typed accessor in ``data.py``
(``data.nvidia().repo.x``).
How to add a file: a module here, an entry in ``MODELS``, an accessor in ``data.py``.
Cross-file references (a platform's family has package tables, a profile's arch is a known
GPU...) are checked in tests/unit/test_data_models.py.
"""

from __future__ import annotations

from pydantic import BaseModel

from pyinfra_sglang.data_models.apt import Apt
from pyinfra_sglang.data_models.attention_backends import AttentionBackends, SparseBackend
from pyinfra_sglang.data_models.base import Number, Release
from pyinfra_sglang.data_models.dcgm import Dcgm, DcgmDiag, DcgmInstall, DiagResult
from pyinfra_sglang.data_models.diagnosis import (
    Diagnosis,
    DiagnosisBandwidth,
    DiagnosisBusy,
    DiagnosisCompute,
    DiagnosisHost,
    DiagnosisLimits,
    DiagnosisLink,
    DiagnosisMemoryBandwidth,
    DiagnosisMemoryCapacity,
    DiagnosisServer,
)
from pyinfra_sglang.data_models.gpu_health import (
    ClockHealth,
    GpuHealth,
    HealthAction,
    NvlinkHealth,
    XidEntry,
)
from pyinfra_sglang.data_models.gpus import Gpu, Gpus
from pyinfra_sglang.data_models.host_driver import DriverOrigin, HostDriver, HostToolkits
from pyinfra_sglang.data_models.memory_fit import MemoryFit, MemoryFitMtp
from pyinfra_sglang.data_models.model import CacheDirRules, DiskMargin, Model, ModelDownload
from pyinfra_sglang.data_models.model_families import FamilyRule, ModelFamilies
from pyinfra_sglang.data_models.model_shape import ModelShapeData, WeightFormat
from pyinfra_sglang.data_models.monitoring import (
    MetricRename,
    Monitoring,
    MonitoringAlert,
    MonitoringDcgmExporter,
    MonitoringFirewall,
    MonitoringGrafana,
    MonitoringNodeExporter,
    MonitoringPrometheus,
)
from pyinfra_sglang.data_models.multinode_firewall import MultinodeFirewall
from pyinfra_sglang.data_models.multinode_preflight import MultinodePreflight
from pyinfra_sglang.data_models.nvidia import (
    BranchSupport,
    CudaDriverMinimum,
    CudaToolkit,
    DriverArchitecture,
    DriverInstallPackages,
    DriverPackage,
    FabricManager,
    Flavor,
    FlavorPackages,
    MokPaths,
    Nouveau,
    Nvidia,
    NvidiaDriver,
    NvidiaRepo,
    SecureBoot,
    SubnetManager,
)
from pyinfra_sglang.data_models.nvidia_smi import NvidiaSmi, QueryCsv, SmiQ, Topo
from pyinfra_sglang.data_models.parallelism import (
    A2a,
    A2aChoices,
    EpOneOrAll,
    Parallelism,
    ParallelismEstimate,
)
from pyinfra_sglang.data_models.pcie import Acs, Pcie, PcieGeneration, PeerProbe
from pyinfra_sglang.data_models.platforms import BasePackages, Platform, Platforms
from pyinfra_sglang.data_models.python import (
    FlashAttn,
    Kernel,
    Python,
    PythonRouter,
    RouterPin,
    Stack,
    Stacks,
    Torch,
    Uv,
    Venv,
)
from pyinfra_sglang.data_models.report import Panel, PanelLimit, PanelSeries, Report, ReportSteps
from pyinfra_sglang.data_models.rollout import (
    Rollout,
    RolloutPaths,
    RolloutRouter,
    RolloutValidation,
)
from pyinfra_sglang.data_models.sglang_bench import (
    BenchModule,
    BenchRun,
    ServerMetricNames,
    SglangBench,
)
from pyinfra_sglang.data_models.sglang_flags import (
    DpAttention,
    Flag,
    FlagSpelling,
    FlagVersions,
    Mtp,
    SglangFlags,
)
from pyinfra_sglang.data_models.sglang_service import (
    Cache,
    Gateway,
    Multinode,
    NcclP2p,
    NcclP2pLevel,
    Secrets,
    ServiceEnvironment,
    ServiceFile,
    ServiceFiles,
    ServiceRouter,
    ServiceUser,
    SglangService,
    UnitSettings,
)
from pyinfra_sglang.data_models.tuning import Tuning, TuningSearch, TuningSetting
from pyinfra_sglang.data_models.watchdog import (
    Watchdog,
    WatchdogCheck,
    WatchdogProgram,
    WatchdogState,
    WatchdogUnits,
)

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
    "model_families": ModelFamilies,
    "model_shape": ModelShapeData,
    "monitoring": Monitoring,
    "multinode_firewall": MultinodeFirewall,
    "multinode_preflight": MultinodePreflight,
    "nvidia": Nvidia,
    "nvidia_smi": NvidiaSmi,
    "parallelism": Parallelism,
    "pcie": Pcie,
    "platforms": Platforms,
    "python": Python,
    "report": Report,
    "rollout": Rollout,
    "sglang_bench": SglangBench,
    "sglang_flags": SglangFlags,
    "sglang_service": SglangService,
    "tuning": Tuning,
    "watchdog": Watchdog,
}

__all__ = [
    "A2a",
    "A2aChoices",
    "Acs",
    "Apt",
    "AttentionBackends",
    "BasePackages",
    "BenchModule",
    "BenchRun",
    "BranchSupport",
    "Cache",
    "CacheDirRules",
    "ClockHealth",
    "CudaDriverMinimum",
    "CudaToolkit",
    "Dcgm",
    "DcgmDiag",
    "DcgmInstall",
    "DiagResult",
    "Diagnosis",
    "DiagnosisBandwidth",
    "DiagnosisBusy",
    "DiagnosisCompute",
    "DiagnosisHost",
    "DiagnosisLimits",
    "DiagnosisLink",
    "DiagnosisMemoryBandwidth",
    "DiagnosisMemoryCapacity",
    "DiagnosisServer",
    "DiskMargin",
    "DpAttention",
    "DriverArchitecture",
    "DriverInstallPackages",
    "DriverOrigin",
    "DriverPackage",
    "EpOneOrAll",
    "FabricManager",
    "Flag",
    "FlagSpelling",
    "FlagVersions",
    "FlashAttn",
    "Flavor",
    "FlavorPackages",
    "Gateway",
    "Gpu",
    "GpuHealth",
    "Gpus",
    "HealthAction",
    "HostDriver",
    "HostToolkits",
    "Kernel",
    "MODELS",
    "FamilyRule",
    "ModelFamilies",
    "ModelShapeData",
    "WeightFormat",
    "MemoryFit",
    "MemoryFitMtp",
    "MetricRename",
    "Model",
    "ModelDownload",
    "MokPaths",
    "Monitoring",
    "MonitoringAlert",
    "MonitoringDcgmExporter",
    "MonitoringFirewall",
    "MonitoringGrafana",
    "MonitoringNodeExporter",
    "MonitoringPrometheus",
    "Mtp",
    "Multinode",
    "MultinodeFirewall",
    "MultinodePreflight",
    "NcclP2p",
    "NcclP2pLevel",
    "Nouveau",
    "Number",
    "Nvidia",
    "NvidiaDriver",
    "NvidiaRepo",
    "NvidiaSmi",
    "NvlinkHealth",
    "Panel",
    "PanelLimit",
    "PanelSeries",
    "Parallelism",
    "ParallelismEstimate",
    "Pcie",
    "PcieGeneration",
    "PeerProbe",
    "Platform",
    "Platforms",
    "Python",
    "PythonRouter",
    "QueryCsv",
    "Release",
    "Report",
    "Rollout",
    "RolloutPaths",
    "RolloutRouter",
    "RolloutValidation",
    "ReportSteps",
    "RouterPin",
    "Secrets",
    "SecureBoot",
    "ServerMetricNames",
    "ServiceEnvironment",
    "ServiceFile",
    "ServiceFiles",
    "ServiceRouter",
    "ServiceUser",
    "SglangBench",
    "SglangFlags",
    "SglangService",
    "SmiQ",
    "SparseBackend",
    "Stack",
    "Stacks",
    "SubnetManager",
    "Topo",
    "Torch",
    "Tuning",
    "TuningSearch",
    "TuningSetting",
    "UnitSettings",
    "Uv",
    "Venv",
    "Watchdog",
    "WatchdogCheck",
    "WatchdogProgram",
    "WatchdogState",
    "WatchdogUnits",
    "XidEntry",
]
