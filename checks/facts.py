"""Facts pyinfra-sglang reads from hosts: small FactBase classes that parse real output."""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from pyinfra.api import FactBase


class VirtualizationDict(TypedDict):
    container: str | None
    vm: str | None


class Virtualization(FactBase[VirtualizationDict]):
    """Container and VM technology the host runs in, from ``systemd-detect-virt``.

    ``{"container": "systemd-nspawn", "vm": None}``; None where there is none. A host without
    systemd-detect-virt reports ``"unknown"`` for the container, and for the VM
    ``"hypervisor"`` when the CPU flags say it runs under one (a Firecracker VM), else
    ``"unknown"``.
    """

    # systemd-detect-virt prints "none" and exits 1 when it finds nothing.
    def command(self) -> str:
        return (
            "if command -v systemd-detect-virt >/dev/null 2>&1; then "
            "systemd-detect-virt --container || true; systemd-detect-virt --vm || true; "
            "else echo unknown; grep -qw hypervisor /proc/cpuinfo && echo hypervisor || echo unknown; fi"
        )

    def process(self, output) -> VirtualizationDict:
        lines = [line.strip() for line in output if line.strip()]
        container, vm = (lines + ["none", "none"])[:2]
        return {
            "container": None if container == "none" else container,
            "vm": None if vm == "none" else vm,
        }


def detected_vm(virtualization: dict | None) -> str | None:
    """The VM technology a Virtualization fact found; None for none or unknown."""
    vm = (virtualization or {}).get("vm")
    return None if vm in (None, "none", "unknown") else vm


class KernelHeadersDict(TypedDict):
    kernel_release: str
    package: str
    installed: bool
    candidate: str | None
    apt_lists_present: bool


class KernelHeaders(FactBase[KernelHeadersDict]):
    """The headers package for the running kernel: installed? which candidate does apt offer?

    ``package_template`` names the package, with ``{kernel_release}`` for ``uname -r``.
    ``apt_lists_present`` tells whether ``candidate: None`` means "the distro does not ship
    it" (lists present) or "apt has never been updated" (no lists).
    """

    def command(self, package_template: str = "linux-headers-{kernel_release}") -> str:
        package = package_template.replace("{kernel_release}", "$(uname -r)")
        return (
            f'release=$(uname -r); pkg="{package}"; echo "$release"; echo "$pkg"; '
            "dpkg-query -W -f='${Status}\\n' \"$pkg\" 2>/dev/null | grep -q ' installed$' "
            "&& echo installed || echo absent; "
            "apt-cache policy \"$pkg\" 2>/dev/null | awk '/Candidate:/ {print $2}' | "
            "grep . || echo '(none)'; "
            "ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages' && echo lists || echo nolists"
        )

    def process(self, output) -> KernelHeadersDict:
        release, package, installed, candidate, lists = [line.strip() for line in output][:5]
        return {
            "kernel_release": release,
            "package": package,
            "installed": installed == "installed",
            "candidate": None if candidate == "(none)" else candidate,
            "apt_lists_present": lists == "lists",
        }


# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
_NVRM = re.compile(r"^NVRM version:\s+NVIDIA UNIX\b(?P<banner>.*?)\s(?P<version>\d+\.\d+(?:\.\d+)?)\s")


class NvidiaLoadedModuleDict(TypedDict):
    version: str
    flavor: str  # "open" or "proprietary"


class NvidiaLoadedModule(FactBase[NvidiaLoadedModuleDict | None]):
    """The NVIDIA kernel module the running kernel has loaded, from /proc/driver/nvidia/version;
    None when no NVIDIA module is loaded."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output) -> NvidiaLoadedModuleDict | None:
        for line in output:
            match = _NVRM.match(line)
            if match:
                flavor = "open" if "Open Kernel Module" in match["banner"] else "proprietary"
                return {"version": match["version"], "flavor": flavor}
        return None


# "Cuda compilation tools, release 13.1, V13.1.80"
_NVCC_RELEASE = re.compile(r"release (?P<release>\d+\.\d+), V(?P<version>[\d.]+)")


class NvccReleaseDict(TypedDict):
    release: str
    version: str


class NvccRelease(FactBase[NvccReleaseDict | None]):
    """What ``nvcc --version`` at ``path`` reports; None when there is no nvcc there."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version || true"

    def process(self, output) -> NvccReleaseDict | None:
        for line in output:
            match = _NVCC_RELEASE.search(line)
            if match:
                return {"release": match["release"], "version": match["version"]}
        return None


class AptSourceEntry(TypedDict):
    file: str
    line: int  # 1-based line of the entry (one-line format) or of its Components: field
    format: str  # "one-line" or "deb822"
    uris: list[str]
    components: list[str]


class AptSourceEntries(FactBase[list[AptSourceEntry]]):
    """The host's apt source entries that name components (``main`` and friends).

    Flat repositories (suite ``/``, as NVIDIA's) have no components and are not listed.
    """

    @staticmethod
    def default() -> list[AptSourceEntry]:
        return []

    def command(self) -> str:
        return (
            "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
            "/etc/apt/sources.list.d/*.sources; do "
            '[ -f "$f" ] && awk -v f="$f" \'{print f "\\t" FNR "\\t" $0}\' "$f"; '
            "done; true"
        )

    def process(self, output) -> list[AptSourceEntry]:
        entries: list[AptSourceEntry] = []
        stanza_uris: dict[str, list[str]] = {}
        for raw in output:
            path, number, text = (raw.split("\t", 2) + ["", ""])[:3]
            text = text.split("#", 1)[0].strip()
            if path.endswith(".sources"):
                key, _, value = text.partition(":")
                if not text:
                    stanza_uris.pop(path, None)
                elif key.strip().lower() == "uris":
                    stanza_uris[path] = value.split()
                elif key.strip().lower() == "components":
                    entries.append({
                        "file": path, "line": int(number), "format": "deb822",
                        "uris": stanza_uris.get(path, []), "components": value.split(),
                    })  # fmt: skip
                continue
            words = re.sub(r"\[[^]]*\]", " ", text).split()
            if len(words) >= 4 and words[0] in ("deb", "deb-src"):
                entries.append({
                    "file": path, "line": int(number), "format": "one-line",
                    "uris": [words[1]], "components": words[3:],
                })  # fmt: skip
        return entries


class MemoryInfoDict(TypedDict):
    total_kb: int
    available_kb: int


class MemoryInfo(FactBase[MemoryInfoDict]):
    """Total and available memory from /proc/meminfo (available: what can be used without
    swapping, the figure a build may plan with)."""

    def command(self) -> str:
        return "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"

    def process(self, output) -> MemoryInfoDict:
        values = {}
        for line in output:
            key, _, rest = line.partition(":")
            values[key.strip()] = int(rest.split()[0])
        return {"total_kb": values["MemTotal"], "available_kb": values["MemAvailable"]}


# One query for everything the roles and checks read per GPU; the same command as the
# shared captures, so the test double replays it verbatim.
GPU_QUERY_FIELDS = (
    "index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
    "persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm"
)


def parse_gpu_query_csv(lines: list[str]) -> list[dict[str, str | None]]:
    """Rows of an ``nvidia-smi --query-gpu=... --format=csv`` output, keyed by field name
    (units dropped from the header: ``memory.total [MiB]`` -> ``memory.total``).

    ``[N/A]`` and ``[Not Supported]`` become None. A file holding several samples (several
    header lines) yields the last sample only.
    """
    rows: list[dict[str, str | None]] = []
    header: list[str] | None = None
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if cells and cells[0] == "index":
            header = [cell.split(" [", 1)[0] for cell in cells]
            rows = []
        elif header and len(cells) == len(header):
            rows.append({
                key: (None if value.startswith("[") else value)
                for key, value in zip(header, cells)
            })  # fmt: skip
    return rows


class NvidiaGpus(FactBase[list[dict[str, str | None]]]):
    """Every GPU nvidia-smi sees, one dict per GPU (see GPU_QUERY_FIELDS); [] without a
    working driver."""

    @staticmethod
    def default() -> list[dict[str, str | None]]:
        return []

    def command(self) -> str:
        return (
            "command -v nvidia-smi >/dev/null 2>&1 && "
            f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv || true"
        )

    def process(self, output) -> list[dict[str, str | None]]:
        return parse_gpu_query_csv(list(output))


class PythonPackages(FactBase[dict[str, str]]):
    """Distributions installed in a virtualenv, {normalized name: version}, read from its
    *.dist-info folders (works for uv venvs, which have no pip); {} when there is no venv."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, venv: str) -> str:
        return f"ls -d {shlex.quote(venv)}/lib/python*/site-packages/*.dist-info 2>/dev/null || true"

    def process(self, output) -> dict[str, str]:
        packages = {}
        for line in output:
            name_version = line.strip().rsplit("/", 1)[-1].removesuffix(".dist-info")
            name, _, version = name_version.partition("-")
            if version:
                packages[re.sub(r"[-_.]+", "-", name).lower()] = version
        return packages


class PythonVersion(FactBase[str | None]):
    """``X.Y.Z`` of the python at ``path``; None when there is none."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version 2>&1 || true"

    def process(self, output) -> str | None:
        for line in output:
            match = re.match(r"Python (\d+\.\d+\.\d+)", line.strip())
            if match:
                return match.group(1)
        return None


class FileDigests(FactBase[dict[str, str | None]]):
    """sha256 of each of ``paths`` ({path: digest, or None when missing}): lets an operation
    compare rendered content, secrets included, without reading it back."""

    def command(self, paths: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return f"for p in {quoted}; do if [ -f \"$p\" ]; then sha256sum \"$p\"; else echo \"- $p\"; fi; done"

    def process(self, output) -> dict[str, str | None]:
        digests: dict[str, str | None] = {}
        for line in output:
            digest, _, path = line.strip().partition(" ")
            digests[path.strip().lstrip("*")] = None if digest == "-" else digest
        return digests


# `nvidia-smi topo -m` and `topo -p2p <mode>` print a matrix: a header naming the devices
# (GPU0, GPU1, ..., then NICs such as NIC0 or mlx5_0), then CPU/NUMA affinity columns and a
# legend. The header carries ANSI underline escapes; columns are tab- or space-separated.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_NAME = re.compile(r"^GPU\d+$")
_DEVICE_NAME = re.compile(r"^[A-Za-z][\w.-]*\d$")  # GPU0, NIC1, mlx5_0; not "CPU", "Affinity"


def _parse_topo_grid(lines) -> dict[str, dict[str, str]]:
    """{row GPU: {column GPU: cell}} of a topo matrix, GPU rows and columns only."""
    columns: list[str] | None = None
    matrix: dict[str, dict[str, str]] = {}
    for line in lines:
        tokens = _ANSI.sub("", line).split()
        if not tokens or not _GPU_NAME.match(tokens[0]):
            continue  # blank, legend, NIC row, command line, comment
        if columns is None:
            columns = []
            for token in tokens:
                if not _DEVICE_NAME.match(token):
                    break  # affinity columns follow the devices
                columns.append(token)
            continue
        matrix[tokens[0]] = {
            column: cell
            for column, cell in zip(columns, tokens[1:])
            if _GPU_NAME.match(column)
        }
    return matrix


def parse_topo_matrix(lines) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -m`` as ``{"GPU0": {"GPU0": "X", "GPU1": "NV18"}, ...}``: GPU rows
    and columns only (NICs, affinity columns and the legend are dropped)."""
    return _parse_topo_grid(lines)


def parse_topo_p2p(lines) -> dict[str, dict[str, str]]:
    """``nvidia-smi topo -p2p r|w|n|a|p`` as ``{"GPU0": {"GPU0": "X", "GPU1": "OK"}, ...}``
    (cells OK, CNS, GNS, TNS, NS, U); the legend is dropped."""
    return _parse_topo_grid(lines)


def topology_has_nvlink(matrix: dict[str, dict[str, str]]) -> bool:
    """True when any two different GPUs of a topo -m matrix are joined by NVLink (``NV<n>``)."""
    return any(
        row != column and re.fullmatch(r"NV\d+", cell)
        for row, cells in matrix.items()
        for column, cell in cells.items()
    )


class NvidiaTopology(FactBase[dict[str, dict[str, str]]]):
    """How each pair of GPUs is connected, from ``nvidia-smi topo -m`` (see parse_topo_matrix);
    {} without nvidia-smi."""

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def command(self) -> str:
        return "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -m || true"

    def process(self, output) -> dict[str, dict[str, str]]:
        return parse_topo_matrix(list(output))


class NvidiaP2P(FactBase[dict[str, dict[str, str]]]):
    """Peer-to-peer status of each pair of GPUs, from ``nvidia-smi topo -p2p <mode>``
    (mode r, w, n, a or p; see parse_topo_p2p); {} without nvidia-smi."""

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def command(self, mode: str = "r") -> str:
        return f"command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -p2p {shlex.quote(mode)} || true"

    def process(self, output) -> dict[str, dict[str, str]]:
        return parse_topo_p2p(list(output))


def parse_gpu_query_samples(lines: list[str]) -> list[list[dict[str, str | None]]]:
    """Every sample of a ``--query-gpu`` output that was printed several times (one header
    line per sample), oldest first."""
    samples: list[list[str]] = []
    for line in lines:
        if line.split(",", 1)[0].strip() == "index":
            samples.append([])
        if samples:
            samples[-1].append(line)
    return [parse_gpu_query_csv(sample) for sample in samples]


class GpuQueryUnderLoad(FactBase[dict]):
    """The ``--query-gpu`` readings sampled while ``load`` (a shell command) runs: PCIe link
    generation drops when a GPU idles, so links are judged while something uses them.

    ``{"load_rc": int, "load_output": [lines], "samples": [[gpu rows], ...]}``; no samples
    without nvidia-smi. Sampling stops when the load ends (at most ``timeout_s``).
    """

    def command(self, load: str, interval_s: float = 0.2, timeout_s: int = 120) -> str:
        query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
        return (
            'tmp=$(mktemp -d); '
            f'( while [ ! -e "$tmp/done" ]; do {query} 2>/dev/null; sleep {interval_s}; done ) '
            '> "$tmp/samples" & sampler=$!; '
            f'timeout {timeout_s} sh -c {shlex.quote(load)} > "$tmp/load" 2>&1; rc=$?; '
            'touch "$tmp/done"; wait $sampler; '
            'echo "### load rc=$rc"; cat "$tmp/load"; echo "### samples"; cat "$tmp/samples"; '
            'rm -rf "$tmp"'
        )

    def process(self, output) -> dict:
        lines = list(output)
        marks = [i for i, line in enumerate(lines) if line.startswith("### ")]
        if len(marks) < 2 or not lines[marks[0]].startswith("### load rc="):
            # The wrapper itself failed (no temporary folder, say): nothing ran.
            return {"load_rc": None, "load_output": lines, "samples": []}
        load_at, samples_at = marks[0], marks[-1]
        return {
            "load_rc": int(lines[load_at].rsplit("=", 1)[1]),
            "load_output": lines[load_at + 1 : samples_at],
            "samples": [s for s in parse_gpu_query_samples(lines[samples_at + 1 :]) if s],
        }


class IommuState(FactBase[dict]):
    """IOMMU settings on the kernel command line and whether the kernel runs an IOMMU:
    ``{"cmdline": {"intel_iommu": "on", "iommu": "pt", ...}, "active": bool}``. With address
    translation on (no ``iommu=pt``), peer-to-peer traffic between GPUs is redirected through
    the root complex."""

    def command(self) -> str:
        return "cat /proc/cmdline; echo \"### iommu_groups=$(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l)\""

    def process(self, output) -> dict:
        cmdline: dict[str, str] = {}
        groups = 0
        for line in output:
            if line.startswith("### iommu_groups="):
                groups = int(line.split("=", 1)[1] or 0)
                continue
            for word in line.split():
                key, _, value = word.partition("=")
                if key in ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough"):
                    cmdline[key] = value
        return {"cmdline": cmdline, "active": groups > 0}


def iommu_passthrough(iommu: dict) -> bool:
    """DMA passes the IOMMU untranslated: ``iommu=pt`` or ``iommu.passthrough=1``."""
    cmdline = iommu["cmdline"]
    return cmdline.get("iommu") == "pt" or cmdline.get("iommu.passthrough") in ("1", "y", "on")


class SystemdUnitState(FactBase[dict[str, str]]):
    """``systemctl show`` properties of one unit: LoadState (``not-found`` when there is no
    such unit), ActiveState, SubState, NRestarts, ActiveEnterTimestamp."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        return (
            "systemctl show -p LoadState -p ActiveState -p SubState -p NRestarts "
            f"-p ActiveEnterTimestamp {shlex.quote(unit)} 2>/dev/null || true"
        )

    def process(self, output) -> dict[str, str]:
        return dict(line.strip().split("=", 1) for line in output if "=" in line)


# `nvidia-smi -q` fields that map onto --query-gpu names, as paths of indented section names.
_SMI_Q_FIELDS = {
    "name": ("Product Name",),
    "pci.bus_id": ("PCI", "Bus Id"),
    "pcie.link.gen.current": ("PCI", "GPU Link Info", "PCIe Generation", "Current"),
    "pcie.link.gen.max": ("PCI", "GPU Link Info", "PCIe Generation", "Max"),
    "pcie.link.gen.gpumax": ("PCI", "GPU Link Info", "PCIe Generation", "Device Max"),
    "pcie.link.gen.hostmax": ("PCI", "GPU Link Info", "PCIe Generation", "Host Max"),
    "pcie.link.width.current": ("PCI", "GPU Link Info", "Link Width", "Current"),
    "pcie.link.width.max": ("PCI", "GPU Link Info", "Link Width", "Max"),
    "persistence_mode": ("Persistence Mode",),
    "memory.total": ("FB Memory Usage", "Total"),
}


def parse_smi_q(lines) -> list[dict[str, str | None]]:
    """``nvidia-smi -q`` as the rows parse_gpu_query_csv gives (the fields it shares with
    GPU_QUERY_FIELDS; widths without their ``x``; N/A -> None), one per GPU in order."""
    driver = None
    sections: list[dict[tuple[str, ...], str | None]] = []  # one {path: value} per GPU
    path: list[str] = []
    for raw in lines:
        line = _ANSI.sub("", raw.rstrip("\n"))
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", line):
            sections.append({})
            continue
        key, colon, value = line.strip().partition(":")
        depth = (len(line) - len(line.lstrip(" "))) // 4  # nvidia-smi indents by 4
        if not key or depth == 0:
            if key.strip() == "Driver Version":
                driver = value.strip()
            continue
        if not sections:
            continue
        path = path[: depth - 1] + [key.strip()]
        if colon:
            sections[-1][tuple(path)] = None if value.strip() in ("N/A", "") else value.strip()
    rows = []
    for index, values in enumerate(sections):
        row = {key: values.get(fields) for key, fields in _SMI_Q_FIELDS.items()}
        for key in ("pcie.link.width.current", "pcie.link.width.max"):
            row[key] = row[key].removesuffix("x") if row[key] else None
        rows.append({"index": str(index), "driver_version": driver, **row})
    return rows
