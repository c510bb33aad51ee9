"""Facts of the NVIDIA driver and GPUs: nvidia-smi, nvcc, the loaded module, NVIDIA's PCI
functions, cuInit."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.driver.fabric import (
    CUDA_INIT_PROBE,
    FabricDict,
    parse_cuda_init,
    parse_fabric,
    subnet_manager_modules,
)
from pyinfra_sglang.driver.host_driver import (
    HostDriverStateDict,
    host_driver_state_command,
    parse_host_driver_state,
)
from pyinfra_sglang.parsers.files import (
    count_gpu_classes,
)
from pyinfra_sglang.parsers.nvidia_smi import (
    GPU_QUERY_FIELDS,
    NvccReleaseDict,
    NvidiaLoadedModuleDict,
    parse_gpu_query_csv,
    parse_loaded_module,
    parse_nvcc_release,
)
from pyinfra_sglang.parsers.topo import parse_topo_matrix, parse_topo_p2p
from pyinfra_sglang.parsers.topo_nics import parse_nic_paths


class NvidiaPciDevices(FactBase[int]):
    """NVIDIA display and 3D controllers on the PCI bus (vendor 0x10de, class 0x0300/0x0302),
    read from sysfs: there with or without a driver, so a GPU host that lacks one is told
    from a machine that has no GPU at all."""

    def command(self) -> str:
        return (
            "for d in /sys/bus/pci/devices/*; do "
            '[ -r "$d/vendor" ] && [ "$(cat "$d/vendor")" = 0x10de ] && cat "$d/class"; '
            "done; true"
        )

    @staticmethod
    def default() -> int:
        return 0  # no output: no NVIDIA device (the command itself cannot fail)

    def process(self, output) -> int:
        return count_gpu_classes(output)


class NvidiaFabric(FactBase[FabricDict]):
    """NVSwitch PCI functions in sysfs (vendor 0x10de, class 0x0680xx, there with or without
    a driver) and each GPU's Fabric state from ``nvidia-smi -q`` (see parse_fabric)."""

    def command(self) -> str:
        wanted = "|".join(subnet_manager_modules())
        return (
            "for d in /sys/bus/pci/devices/*; do "
            '[ -r "$d/vendor" ] && [ "$(cat "$d/vendor")" = 0x10de ] '
            '&& echo "pci $(cat "$d/class")"; '
            "done; "
            f"awk '$1 ~ /^({wanted})$/ {{ print \"module \" $1 }}' /proc/modules 2>/dev/null; "
            "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -q 2>/dev/null | "
            "awk '/^GPU /{print; f=0; next} /^    [^ ]/{f=($1==\"Fabric\")} f'; fi; true"
        )

    @staticmethod
    def default() -> FabricDict:
        return {"nvswitches": 0, "gpus": [], "modules": []}

    def process(self, output) -> FabricDict:
        return parse_fabric(output)


class CudaInit(FactBase[dict]):
    """Does CUDA initialize? cuInit(0) through ctypes on libcuda.so.1, run with the venv's
    python (else python3): {"probed": True, "result": CUresult} or {"probed": False,
    "reason": ...} (see parse_cuda_init)."""

    def command(self, venv: str) -> str:
        python = shlex.quote(f"{venv}/bin/python")
        probe = shlex.quote(CUDA_INIT_PROBE)
        return (
            f"if [ -x {python} ]; then py={python}; "
            "elif command -v python3 >/dev/null 2>&1; then py=python3; "
            "else echo no-python; exit 0; fi; "
            f'"$py" -c {probe} 2>&1 | tail -n 5; true'
        )

    def process(self, output) -> dict:
        return parse_cuda_init(output)


class HostDriverState(FactBase[HostDriverStateDict]):
    """What other installers left beside the driver: NVIDIA's runfile markers, and every
    CUDA toolkit's nvcc with its release (see parse_host_driver_state)."""

    @staticmethod
    def default() -> HostDriverStateDict:
        return {"runfile": [], "toolkits": {}}

    def command(self) -> str:
        return host_driver_state_command()

    def process(self, output) -> HostDriverStateDict:
        return parse_host_driver_state(output)


class NvidiaLoadedModule(FactBase[NvidiaLoadedModuleDict | None]):
    """The NVIDIA kernel module the running kernel has loaded, from /proc/driver/nvidia/version;
    None when no NVIDIA module is loaded."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output) -> NvidiaLoadedModuleDict | None:
        return parse_loaded_module(output)


class NvccRelease(FactBase[NvccReleaseDict | None]):
    """What ``nvcc --version`` at ``path`` reports; None when there is no nvcc there."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version || true"

    def process(self, output) -> NvccReleaseDict | None:
        return parse_nvcc_release(output)


class NvidiaGpus(FactBase[list[dict[str, str | None]]]):
    """Every GPU nvidia-smi sees, one dict per GPU (see GPU_QUERY_FIELDS); [] without a
    working driver."""

    @staticmethod
    def default() -> list[dict[str, str | None]]:
        return []

    def requires_command(self) -> str:
        return "nvidia-smi"

    # nvidia-smi without a loaded driver exits non-zero: that is no GPU here, not a failure.
    def command(self) -> str:
        return f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv || true"

    def process(self, output) -> list[dict[str, str | None]]:
        return parse_gpu_query_csv(output)


class NvidiaTopology(FactBase[dict[str, dict[str, str]]]):
    """How each pair of GPUs is connected, from ``nvidia-smi topo -m`` (see parse_topo_matrix);
    {} without nvidia-smi."""

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return "nvidia-smi topo -m || true"

    def process(self, output) -> dict[str, dict[str, str]]:
        return parse_topo_matrix(output)


class NvidiaNicPaths(FactBase[dict | None]):
    """How each GPU reaches each NIC, from ``nvidia-smi topo -m`` (see parse_nic_paths):
    {"read": whether a matrix was printed, "paths": {GPU index: {NIC device: path}}}; None
    without nvidia-smi."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return "nvidia-smi topo -m || true"

    def process(self, output) -> dict | None:
        lines = list(output)
        read = any(line.split()[:1] == ["GPU0"] for line in lines)
        return {"read": read, "paths": parse_nic_paths(lines)}


class NvidiaP2P(FactBase[dict[str, dict[str, str]]]):
    """Peer-to-peer status of each pair of GPUs, from ``nvidia-smi topo -p2p <mode>``
    (mode r, w, n, a or p; see parse_topo_p2p); {} without nvidia-smi."""

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def requires_command(self, mode: str = "r") -> str:
        return "nvidia-smi"

    def command(self, mode: str = "r") -> str:
        return f"nvidia-smi topo -p2p {shlex.quote(mode)} || true"

    def process(self, output) -> dict[str, dict[str, str]]:
        return parse_topo_p2p(output)
