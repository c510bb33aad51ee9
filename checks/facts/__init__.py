"""Facts pyinfra-sglang reads from hosts: small FactBase classes in pyinfra's own shape
(pyinfra/facts/*.py): a command, ``requires_command`` when the command needs a program the
host may lack (pyinfra then returns ``default()`` without running it), ``default()`` where no
output means "not there", and a one-line process() that hands the output to a pure parser in
pyinfra_sglang.parsers.

pyinfra 3.10 (api/facts.py ``get_fact``) returns the default silently while it plans; while the
run executes it logs a warning ("will raise an exception in v4"). So an operation that reads
at execution (the audit) asks ``Which`` first where the program may be missing.

One module per tool, as pyinfra lays out its own (facts/apt.py, facts/systemd.py, ...):
``nvidia`` (nvidia-smi, nvcc, the driver), ``gpu_health`` (Xid lines, error counters, dcgmi),
``apt``, ``kernel`` (sysfs, /proc, DKMS, Secure Boot), ``python``, ``files``, ``systemd``,
``http``, ``network`` (ip route); ``reading`` is the read engine (read_once,
read_together). Every fact is imported from here.

A GPU workload is no fact: checks/gpu_load.py runs it."""

from __future__ import annotations

from checks.facts.apt import (
    AptPolicy,
    AptSourceEntries,
    NvidiaSmiPackage,
    RepositoryEntries,
)
from checks.facts.files import (
    CacheDirState,
    CacheDirStates,
    FileDigests,
    FileStates,
    FirstLine,
    FreeBytes,
    JsonRecord,
    ModelConfigJson,
    PrivateFolder,
    SnapshotDamage,
    SnapshotFiles,
    StateFile,
)
from checks.facts.gpu_health import (
    DcgmDiag,
    KernelXids,
    NvidiaMemoryHealth,
    NvidiaNvlinkErrors,
)
from checks.facts.http import (
    HttpStatus,
)
from checks.facts.kernel import (
    DkmsState,
    IommuState,
    KernelHeaders,
    MemoryInfo,
    MokEnrolled,
    PcieAcs,
    SecureBootState,
    Virtualization,
)
from checks.facts.network import GroupNetwork, RouteTo
from checks.facts.nvidia import (
    CudaInit,
    HostDriverState,
    NvccRelease,
    NvidiaFabric,
    NvidiaGpus,
    NvidiaLoadedModule,
    NvidiaNicPaths,
    NvidiaP2P,
    NvidiaPciDevices,
    NvidiaTopology,
)
from checks.facts.python import (
    PythonPackages,
    PythonVersion,
    Virtualenvs,
)
from checks.facts.reading import (
    Facts,
    changes_so_far,
    read_once,
    read_together,
)
from checks.facts.systemd import (
    SystemdUnitState,
    UnitLeftovers,
)

__all__ = [
    "AptPolicy",
    "AptSourceEntries",
    "CacheDirState",
    "CacheDirStates",
    "CudaInit",
    "DcgmDiag",
    "DkmsState",
    "Facts",
    "FileDigests",
    "FileStates",
    "FirstLine",
    "FreeBytes",
    "GroupNetwork",
    "HostDriverState",
    "HttpStatus",
    "IommuState",
    "JsonRecord",
    "KernelHeaders",
    "KernelXids",
    "MemoryInfo",
    "ModelConfigJson",
    "MokEnrolled",
    "NvccRelease",
    "NvidiaFabric",
    "NvidiaGpus",
    "NvidiaLoadedModule",
    "NvidiaMemoryHealth",
    "NvidiaNvlinkErrors",
    "NvidiaP2P",
    "NvidiaPciDevices",
    "NvidiaSmiPackage",
    "NvidiaNicPaths",
    "NvidiaTopology",
    "PcieAcs",
    "PrivateFolder",
    "PythonPackages",
    "PythonVersion",
    "RepositoryEntries",
    "RouteTo",
    "SecureBootState",
    "SnapshotDamage",
    "SnapshotFiles",
    "StateFile",
    "SystemdUnitState",
    "UnitLeftovers",
    "Virtualenvs",
    "Virtualization",
    "changes_so_far",
    "read_once",
    "read_together",
]
