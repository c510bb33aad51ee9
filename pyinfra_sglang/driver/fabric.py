"""NVSwitch systems and NVIDIA Fabric Manager (FM): what the host shows, and whether FM must
run on it. Pure: the NvidiaFabric and CudaInit facts (checks/facts/nvidia.py) hand their output
here; roles/fabric_manager.py and the audit (audit/fabric.py) decide from the results.

On an NVSwitch board (HGX/DGX) CUDA does not initialize (CUDA_ERROR_SYSTEM_NOT_READY, 802)
until FM, at exactly the driver's version, has registered every GPU with the fabric, while
nvidia-smi looks healthy. Sources: data/nvidia.toml [fabric_manager], docs/sources.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from pyinfra_sglang import data
from pyinfra_sglang.parsers.system import detected_vm


class GpuFabricDict(TypedDict):
    index: int
    state: str | None  # "Completed", "In Progress", "N/A", ... as nvidia-smi -q prints it
    status: str | None
    clique_id: str | None


class FabricDict(TypedDict, total=False):
    nvswitches: int  # NVSwitch PCI functions visible in sysfs
    gpus: list[GpuFabricDict]
    # Loaded kernel modules of those NVLink 5's subnet manager needs (absent in records made
    # before they were read).
    modules: list[str]


_GPU = re.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_FIELDS = {"State": "state", "Status": "status", "CliqueId": "clique_id"}


def parse_fabric_sections(lines: Iterable[str]) -> list[GpuFabricDict]:
    """The ``Fabric`` section of each GPU in ``nvidia-smi -q`` (whole, or only its GPU and
    Fabric lines): State, Status and CliqueId as printed, one dict per GPU in order. A pasted
    Fabric section without its GPU line counts as GPU 0. Indentation is read relative to the
    ``Fabric`` line, so a copy indented as a whole reads the same."""
    gpus: list[GpuFabricDict] = []
    fabric_indent: int | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if _GPU.fullmatch(stripped):
            gpus.append({"index": len(gpus), "state": None, "status": None, "clique_id": None})
            fabric_indent = None
            continue
        if stripped == "Fabric":
            if not gpus:
                gpus.append({"index": 0, "state": None, "status": None, "clique_id": None})
            fabric_indent = indent
            continue
        if fabric_indent is None or not stripped:
            continue
        if indent <= fabric_indent:
            fabric_indent = None  # the next section of the GPU
            continue
        if indent != fabric_indent + 4:
            continue  # Health's own fields, one level deeper
        key, colon, value = stripped.partition(":")
        field = _FIELDS.get(key.strip())
        if colon and field:
            gpus[-1][field] = value.strip() or None  # type: ignore[literal-required]
    return gpus


def count_nvswitches(class_lines: Iterable[str]) -> int:
    """PCI class codes (``0x068000``) of vendor 0x10de's functions that are NVSwitches."""
    prefix = data.nvidia().fabric_manager.nvswitch_pci_class
    return sum(1 for line in class_lines if line.strip().startswith(prefix))


def parse_fabric(output: Iterable[str]) -> FabricDict:
    """The NvidiaFabric fact's output: ``pci <class>`` lines (NVIDIA functions in sysfs),
    then ``nvidia-smi -q``'s GPU and Fabric lines."""
    lines = list(output)
    classes = [line.split(None, 1)[1] for line in lines if line.startswith("pci ")]
    modules = [line.split(None, 1)[1].strip() for line in lines if line.startswith("module ")]
    rest = [line for line in lines if not line.startswith(("pci ", "module "))]
    return {
        "nvswitches": count_nvswitches(classes),
        "gpus": parse_fabric_sections(rest),
        "modules": sorted(set(modules)),
    }


def subnet_manager_modules() -> tuple[str, ...]:
    """Every kernel module a subnet manager entry (data/nvidia.toml) names."""
    entries = data.nvidia().fabric_manager.subnet_manager
    return tuple(sorted({m for entry in entries for m in entry.kernel_modules}))


def fabric_attached(gpus: list[GpuFabricDict]) -> bool:
    """Are the GPUs on an NVLink fabric (registered, or waiting to be)? N/A on PCIe boards,
    "Not Supported" where NVML has no fabric for the GPU."""
    states = data.nvidia().fabric_manager.attached_states
    return any(gpu.get("state") in states for gpu in gpus)


def fabric_ready(gpu: GpuFabricDict) -> bool:
    fm = data.nvidia().fabric_manager
    return gpu.get("state") == fm.ready_state and gpu.get("status") == fm.ready_status


@dataclass(frozen=True)
class FabricNeed:
    """Where the host's NVLink fabric is managed: ``here`` (FM must run on this host),
    ``hypervisor`` (a VM given fabric-attached GPUs, no NVSwitch visible: the "shared
    NVSwitch" model, FM runs outside) or ``none`` (no NVSwitch fabric)."""

    where: str
    reason: str

    @property
    def here(self) -> bool:
        return self.where == "here"


def fabric_need(fabric: FabricDict, virtualization: dict | None) -> FabricNeed:
    """Does FM have to run on this host? Yes when NVSwitch PCI functions are visible here,
    or when the GPUs are fabric-attached and the host is no VM (bare metal, or a container,
    even one inside a VM: NVIDIA's driver container runs FM inside it). A VM with
    fabric-attached GPUs and no NVSwitch has its fabric managed by the hypervisor."""
    switches = fabric["nvswitches"]
    gpus = fabric["gpus"]
    attached = fabric_attached(gpus)
    states = ", ".join(sorted({str(g.get("state")) for g in gpus})) or "no GPU read"
    if switches:
        return FabricNeed("here", f"{switches} NVSwitch PCI functions are visible on this host")
    container = (virtualization or {}).get("container")
    container = None if container in (None, "none", "unknown") else container
    vm = detected_vm(virtualization)
    # A container is judged as one, whatever machine it runs on: NVIDIA's driver container
    # runs FM inside it.
    if attached and vm and not container:
        return FabricNeed(
            "hypervisor",
            f"the GPUs are fabric-attached (State {states}) in a VM ({vm}) that sees no "
            "NVSwitch: the hypervisor runs Fabric Manager",
        )
    if attached:
        where = f"in a container ({container})" if container else "on bare metal"
        return FabricNeed(
            "here", f"the GPUs are fabric-attached (State {states}) {where}: FM runs here"
        )
    return FabricNeed("none", f"no NVSwitch and no fabric-attached GPU (Fabric State {states})")


def fabric_manager_candidates(family: str, branch: int) -> tuple[str, ...]:
    """FM's package names in ``family`` for ``branch``, in the order they are tried."""
    names = data.nvidia().fabric_manager.packages[family]
    return tuple(name.format(branch=branch) for name in names)


def is_fabric_manager_package(name: str) -> bool:
    """Is ``name`` one of FM's package names, of any family and branch?"""
    patterns = {
        re.escape(pattern).replace(re.escape("{branch}"), r"\d+")
        for names in data.nvidia().fabric_manager.packages.values()
        for pattern in names
    }
    return any(re.fullmatch(pattern, name) for pattern in patterns)


def installed_fabric_manager(installed: dict[str, list[str]]) -> tuple[str, str] | None:
    """The installed FM package and its (newest) Debian version, any family or branch."""
    for name in sorted(installed):
        if is_fabric_manager_package(name) and installed[name]:
            return name, max(installed[name])
    return None


def subnet_manager_for(archs: Iterable[str | None]):
    """The NVLink Subnet Manager entry (data/nvidia.toml) the newest of ``archs`` ("sm_100")
    needs, or None (NVLink 4 and before need none)."""
    numbers = [int(a.removeprefix("sm_")) for a in archs if a and a.startswith("sm_")]
    entries = sorted(data.nvidia().fabric_manager.subnet_manager, key=lambda e: e.from_arch)
    chosen = None
    for entry in entries:
        if numbers and max(numbers) >= entry.from_arch:
            chosen = entry
    return chosen


# --- whether CUDA initializes ------------------------------------------------------------

# Run with the venv's python (else python3): cuInit(0) through ctypes on libcuda.so.1, one
# JSON line. Standard library only.
CUDA_INIT_PROBE = (
    "import ctypes, json\n"
    "try:\n"
    "    lib = ctypes.CDLL('libcuda.so.1')\n"
    "except OSError as error:\n"
    "    print(json.dumps({'probed': False, 'reason': 'libcuda.so.1 cannot be loaded: '"
    " + str(error)}))\n"
    "else:\n"
    "    print(json.dumps({'probed': True, 'result': int(lib.cuInit(0))}))\n"
)

# CUresult codes the finding names (CUDA Driver API, cuda.h).
CUDA_RESULTS = {
    0: "CUDA_SUCCESS",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    999: "CUDA_ERROR_UNKNOWN",
}


def parse_cuda_init(output: Iterable[str]) -> dict:
    """The CudaInit fact's output: the probe's JSON line, or ``no-python``."""
    lines = [line.strip() for line in output if line.strip()]
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                break
            if isinstance(value, dict) and "probed" in value:
                return value
    if lines == ["no-python"]:
        return {"probed": False, "reason": "no python on the host to run the probe with"}
    shown = " / ".join(lines[-3:]) or "no output"
    return {"probed": False, "reason": f"the probe printed no result ({shown})"}


# --- Fabric Manager against the driver ---------------------------------------------------


def upstream(deb_version: str) -> str:
    """590.48.01-1 -> 590.48.01; 1:580.159.03-0ubuntu0.24.04.1 -> 580.159.03."""
    return deb_version.split(":", 1)[-1].rsplit("-", 1)[0]


def fabric_manager_problems(
    service: dict[str, str], package: tuple[str, str] | None, driver_version: str | None
) -> list[str]:
    """What is wrong with FM on a host that needs it: its service not active, its package
    missing or at another release than the loaded driver's ([] when it is fine). A running
    FM that is no package (a runfile) is taken as it is: its version cannot be read."""
    unit = data.nvidia().fabric_manager.service
    problems = []
    active = service.get("ActiveState")
    if service.get("LoadState") in (None, "not-found"):
        problems.append(f"{unit} does not exist (Fabric Manager is not installed)")
    elif active != "active":
        result = service.get("Result")
        why = f", result {result}" if result and result != "success" else ""
        problems.append(f"{unit} is {active or 'unknown'}{why}")
    if package and driver_version and upstream(package[1]) != driver_version:
        problems.append(
            f"{package[0]} is {upstream(package[1])}, the driver is {driver_version}: FM "
            "runs only at exactly the driver's version"
        )
    return problems
