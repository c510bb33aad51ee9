"""Facts pyinfra-sglang reads from hosts: small FactBase classes in pyinfra's own shape
(pyinfra/facts/*.py): a command, ``requires_command`` when the command needs a program the
host may lack (pyinfra then returns ``default()`` without running it), ``default()`` where no
output means "not there", and a one-line process() that hands the output to a pure parser in
pyinfra_sglang.parsers.

pyinfra 3.10 (api/facts.py ``get_fact``) returns the default silently while it plans; while the
run executes it logs a warning ("will raise an exception in v4"). So an operation that reads
at execution (the audit) asks ``Which`` first where the program may be missing.

A GPU workload is no fact: checks/gpu_load.py runs it."""

from __future__ import annotations

import re
import shlex
import weakref
from typing import TypeVar

from pyinfra.api import FactBase, Host, State, StringCommand
from pyinfra.api.util import get_kwargs_str
from pyinfra.context import ContextObject

from pyinfra_sglang import data
from pyinfra_sglang.host.cache_dir import CacheDirState as CacheDirStateValue
from pyinfra_sglang.host.cache_dir import parse_state
from pyinfra_sglang.host.fabric import (
    CUDA_INIT_PROBE,
    FabricDict,
    parse_cuda_init,
    parse_fabric,
    subnet_manager_modules,
)
from pyinfra_sglang.host.host_driver import (
    HostDriverStateDict,
    host_driver_state_command,
    parse_host_driver_state,
)
from pyinfra_sglang.host.secure_boot import parse_mok_enrolled, parse_secure_boot_state
from pyinfra_sglang.host.transfer_folder import (
    FolderState,
    folder_state_command,
    parse_folder_state,
)
from pyinfra_sglang.parsers.dcgm import parse_dcgm_diag
from pyinfra_sglang.parsers.files import (
    count_gpu_classes,
    parse_counts,
    parse_file_states,
    parse_first_line,
    parse_first_nonempty,
    parse_last_int,
    parse_sized_files,
    parse_venvs_by_age,
)
from pyinfra_sglang.parsers.gpu_health import (
    log_coverage,
    parse_health_q,
    parse_nvlink_errors,
    parse_xid_lines,
)
from pyinfra_sglang.parsers.nvidia_smi import (
    GPU_QUERY_FIELDS,
    NvccReleaseDict,
    NvidiaLoadedModuleDict,
    parse_gpu_query_csv,
    parse_loaded_module,
    parse_nvcc_release,
)
from pyinfra_sglang.parsers.pcie_acs import PcieAcsDict, parse_pcie_acs
from pyinfra_sglang.parsers.system import (
    AptSourceEntry,
    DkmsStateDict,
    KernelHeadersDict,
    MemoryInfoDict,
    RepositoryEntry,
    VirtualizationDict,
    parse_apt_policy,
    parse_apt_source_entries,
    parse_dkms_state,
    parse_file_digests,
    parse_iommu_state,
    parse_json_record,
    parse_kernel_headers,
    parse_meminfo,
    parse_python_packages,
    parse_python_version,
    parse_repository_entries,
    parse_state_file,
    parse_systemd_show,
    parse_virtualization,
)
from pyinfra_sglang.parsers.topo import parse_topo_matrix, parse_topo_p2p

T = TypeVar("T")


class Virtualization(FactBase[VirtualizationDict]):
    """Container and VM technology the host runs in, from ``systemd-detect-virt``
    (see parse_virtualization)."""

    # systemd-detect-virt prints "none" and exits 1 when it finds nothing.
    def command(self) -> str:
        return (
            "if command -v systemd-detect-virt >/dev/null 2>&1; then "
            "systemd-detect-virt --container || true; systemd-detect-virt --vm || true; "
            "else echo unknown; "
            "grep -qw hypervisor /proc/cpuinfo && echo hypervisor || echo unknown; fi"
        )

    def process(self, output) -> VirtualizationDict:
        return parse_virtualization(output)


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


class PcieAcs(FactBase[PcieAcsDict]):
    """PCIe ACS control of every bridge above each NVIDIA GPU (see parse_pcie_acs): each
    GPU's resolved sysfs path names its bridges (parents), then ``lspci -vvv`` of each.
    lspci shows capabilities to root only; run without, the state reads as unknown."""

    @staticmethod
    def default() -> PcieAcsDict:
        return {"lspci": False, "gpus": {}, "bridges": {}}

    # ``devices``: the sysfs folder of PCI devices (a test points it at a copy).
    def command(self, devices: str = "/sys/bus/pci/devices") -> str:
        return (
            "command -v lspci >/dev/null 2>&1 && echo '### lspci yes' || echo '### lspci no'; "
            f"bridges=; for d in {shlex.quote(devices)}/*; do "
            '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue; '
            'case "$(cat "$d/class")" in 0x0300*|0x0302*) ;; *) continue ;; esac; '
            'p=$(readlink -f "$d"); echo "### gpu $p"; q=${p%/*}; '
            'while [ -e "$q/vendor" ]; do bridges="$bridges ${q##*/}"; q=${q%/*}; done; '
            "done; "
            "if command -v lspci >/dev/null 2>&1; then "
            "for b in $(printf '%s\\n' $bridges | sort -u); do lspci -vvv -D -s \"$b\"; done; "
            "fi; true"
        )

    def process(self, output) -> PcieAcsDict:
        return parse_pcie_acs(output)


class KernelHeaders(FactBase[KernelHeadersDict]):
    """The headers package for the running kernel: installed? if not, which candidate does
    apt offer? (see parse_kernel_headers)

    ``package_template`` names the package, with ``{kernel_release}`` for ``uname -r`` and
    ``{flavor}`` for what follows its ABI number (6.1.0-28-cloud-amd64: cloud-amd64;
    6.8.0-45-generic: generic). A kernel without a flavor there gives the package name "-".
    """

    def command(self, package_template: str = "linux-headers-{kernel_release}") -> str:
        # The template's own text quoted, the running kernel's release and flavor put in by
        # the shell.
        variables = {"{kernel_release}": '"$release"', "{flavor}": '"$flavor"'}
        parts = re.split(r"(\{kernel_release\}|\{flavor\})", package_template)
        package = "".join(variables.get(part) or shlex.quote(part) for part in parts if part)
        # No flavor where the template needs one: "-", which no package is called.
        no_flavor = '[ -n "$flavor" ] || pkg=-; ' if "{flavor}" in package_template else ""
        return (
            "release=$(uname -r); flavor=$(printf '%s' \"$release\" | "
            "sed -nE 's/^[0-9]+[.][0-9]+[.][0-9]+-[0-9]+-([a-z0-9-]+)$/\\1/p'); "
            f'pkg={package}; {no_flavor}echo "$release"; echo "$pkg"; '
            # apt-cache loads apt's whole cache (about a second of CPU): asked only for a
            # package not installed, the one case the role needs a candidate for.
            "if dpkg-query -W -f='${Status}\\n' \"$pkg\" 2>/dev/null | grep -q ' installed$'; "
            "then echo installed; echo '(not asked)'; else echo absent; "
            "apt-cache policy \"$pkg\" 2>/dev/null | awk '/Candidate:/ {print $2}' | "
            "grep . || echo '(none)'; fi; "
            "ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages' && echo lists || echo nolists"
        )

    def process(self, output) -> KernelHeadersDict:
        return parse_kernel_headers(output)


class DkmsState(FactBase[DkmsStateDict]):
    """Installed kernels and the NVIDIA modules DKMS built for them (see parse_dkms_state)."""

    def command(self) -> str:
        return (
            'for image in /boot/vmlinuz-*; do [ -e "$image" ] && '
            'echo "kernel ${image#/boot/vmlinuz-}"; done; '
            "dkms status nvidia 2>/dev/null || true"
        )

    def process(self, output) -> DkmsStateDict:
        return parse_dkms_state(output)


class SecureBootState(FactBase[dict]):
    """Secure Boot on or off, and who signed the nvidia module installed for the running
    kernel (see parse_secure_boot_state): mokutil when it is there, else the EFI variable."""

    def command(self) -> str:
        efivar = shlex.quote(data.nvidia().secure_boot.efi_variable)
        return (
            "if command -v mokutil >/dev/null 2>&1; then mokutil --sb-state 2>&1; "
            'echo "mokutil $?"; fi; '
            f'if [ -r {efivar} ]; then echo "efivar $(od -An -t u1 -j4 -N1 {efivar} | '
            "tr -d ' ')\"; elif [ -d /sys/firmware/efi ]; then echo efi; else echo bios; fi; "
            'echo "signer $(modinfo -F signer nvidia 2>/dev/null | head -n1)"'
        )

    def process(self, output) -> dict:
        return parse_secure_boot_state(list(output))


class NvidiaSmiPackage(FactBase[str | None]):
    """The package that installed the nvidia-smi on PATH (dpkg -S); None without either."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return (
            'dpkg -S "$(readlink -f "$(command -v nvidia-smi)")" 2>/dev/null '
            "| head -n1 | cut -d: -f1 || true"
        )

    def process(self, output) -> str | None:
        return parse_first_nonempty(output)


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


class MokEnrolled(FactBase[bool | None]):
    """Is the certificate (DER, base64) enrolled? mokutil --test-key's answer; None without
    mokutil. The certificate is public: it travels in the command, into a temporary file."""

    def requires_command(self, cert_base64: str) -> str:
        return "mokutil"

    def command(self, cert_base64: str) -> str:
        return (
            "cert=$(mktemp); "
            f"printf '%s' {shlex.quote(cert_base64)} | base64 -d > \"$cert\"; "
            'mokutil --test-key "$cert" 2>&1; rm -f "$cert"; true'
        )

    def process(self, output) -> bool | None:
        return parse_mok_enrolled(list(output))


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


class AptSourceEntries(FactBase[list[AptSourceEntry]]):
    """The host's apt source entries that name components (see parse_apt_source_entries)."""

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
        return parse_apt_source_entries(output)


class AptPolicy(FactBase[dict]):
    """Installed and candidate versions of ``packages`` (see parse_apt_policy)."""

    @staticmethod
    def default() -> dict:
        return {}

    def requires_command(self, packages: list[str]) -> str:
        return "apt-cache"

    def command(self, packages: list[str]) -> str:
        names = " ".join(shlex.quote(name) for name in packages)
        return f"apt-cache policy {names} 2>/dev/null || true"

    def process(self, output) -> dict:
        return parse_apt_policy(output)


class RepositoryEntries(FactBase[list[RepositoryEntry]]):
    """The host's active apt source entries, one-line or deb822, with their URIs (see
    parse_repository_entries)."""

    @staticmethod
    def default() -> list[RepositoryEntry]:
        return []

    def command(self) -> str:
        return AptSourceEntries().command()

    def process(self, output) -> list[RepositoryEntry]:
        return parse_repository_entries(output)


class MemoryInfo(FactBase[MemoryInfoDict]):
    """Total and available memory from /proc/meminfo (see parse_meminfo)."""

    def command(self) -> str:
        return "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"

    def process(self, output) -> MemoryInfoDict:
        return parse_meminfo(output)


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


class PythonPackages(FactBase[dict[str, str]]):
    """Distributions installed in a virtualenv, {normalized name: version}, read from its
    *.dist-info folders (works for uv venvs, which have no pip); {} when there is no venv."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, venv: str) -> str:
        return (
            f"ls -d {shlex.quote(venv)}/lib/python*/site-packages/*.dist-info 2>/dev/null || true"
        )

    def process(self, output) -> dict[str, str]:
        return parse_python_packages(output)


class PythonVersion(FactBase[str | None]):
    """``X.Y.Z`` of the python at ``path``; None when there is none."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version 2>&1 || true"

    def process(self, output) -> str | None:
        return parse_python_version(output)


class SnapshotFiles(FactBase[dict[str, int]]):
    """The files of a Hub cache snapshot folder and their sizes ({path: bytes}, symlinks
    followed to their blobs); {} when the folder does not exist. Sizes only: a complete
    400 GB snapshot is checked without reading it."""

    @staticmethod
    def default() -> dict[str, int]:
        return {}

    def command(self, folder: str) -> str:
        quoted = shlex.quote(folder)
        return f"[ -d {quoted} ] && find -L {quoted} -type f -printf '%s\\t%P\\n' || true"

    def process(self, output) -> dict[str, int]:
        return parse_sized_files(output)


class SnapshotDamage(FactBase[dict[str, int]]):
    """What a cut-off download leaves in a Hub cache model folder: snapshot links whose blob
    is missing, and ``.incomplete`` blobs ({"broken": N, "incomplete": M})."""

    @staticmethod
    def default() -> dict[str, int]:
        return {}

    def command(self, model_folder: str) -> str:
        q = shlex.quote(model_folder)
        return (
            f"echo broken $(find {q}/snapshots -xtype l 2>/dev/null | wc -l); "
            f"echo incomplete $(find {q}/blobs -name '*.incomplete' 2>/dev/null | wc -l)"
        )

    def process(self, output) -> dict[str, int]:
        return parse_counts(output)


class FirstLine(FactBase[str | None]):
    """The first line of the file at ``path`` (a Hub cache ref holds one commit); None when
    there is no such file."""

    def command(self, path: str) -> str:
        return f"head -n 1 {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output) -> str | None:
        return parse_first_line(output)


class Virtualenvs(FactBase[list[str]]):
    """The virtualenvs in the folder ``root`` (each holds a pyvenv.cfg), newest first by when
    that file was written (the venv's creation); [] when there are none."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, root: str) -> str:
        return (
            f"for d in {shlex.quote(root.rstrip('/'))}/*/; do "
            '[ -f "$d/pyvenv.cfg" ] && stat -c \'%Y %n\' "$d/pyvenv.cfg"; done 2>/dev/null '
            "| sort -rn || true"
        )

    def process(self, output) -> list[str]:
        return parse_venvs_by_age(output)


class JsonRecord(FactBase[dict | None]):
    """The JSON object in the file at ``path`` (flash-attn's build record); None when there is
    no such file or it holds no JSON object (see parse_json_record)."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output) -> dict | None:
        return parse_json_record(output)


class StateFile(FactBase[dict]):
    """A program's JSON state file at ``path``: {"present", "record"} (parse_state_file), so
    a file that is there but holds no JSON object is told from one never written."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        # Not UTF-8: nothing after "present" (the record is then unreadable, not garbled).
        return (
            f"if [ -e {q} ]; then echo present; "
            f"if iconv -f UTF-8 -t UTF-8 {q} >/dev/null 2>&1; then head -c 1048576 {q}; fi; "
            "fi; true"
        )

    def process(self, output) -> dict:
        return parse_state_file(output)


class FreeBytes(FactBase[int | None]):
    """Free bytes of the filesystem that holds ``path`` (or would: its nearest existing
    parent), for an unprivileged writer as df reports them."""

    def command(self, path: str) -> str:
        return (
            f'p={shlex.quote(path)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
            "df -P -B1 \"$p\" | awk 'NR == 2 {print $4}'"
        )

    def process(self, output) -> int | None:
        return parse_last_int(output)


class CacheDirState(FactBase[CacheDirStateValue]):
    """What is at the Hub cache's ``path`` (pyinfra_sglang/host/cache_dir.py judges it): its deepest
    existing ancestor and where that resolves (a symlinked component shows as a difference),
    the folder's owner, kind and emptiness, the first path below it not owned by ``user``
    (find stops at the first; ``prune``, a folder below ``path`` judged on its own, is left
    out), and the package dpkg says owns it."""

    def command(self, path: str, user: str, prune: str | None = None) -> str:
        p, u = shlex.quote(path), shlex.quote(user)
        skip = f"-path {shlex.quote(prune)} -prune -o " if prune else ""
        return (
            f'p={p}; d=$p; echo "path=$p"; '
            'while [ ! -e "$d" ] && [ ! -L "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done; '
            'echo "deepest=$d"; echo "resolved=$(readlink -f -- "$d")"; '
            'if [ -e "$p" ] || [ -L "$p" ]; then '
            "stat -c 'owner=%U' -- \"$p\"; stat -c 'kind=%F' -- \"$p\"; "
            'if [ -d "$p" ] && [ ! -L "$p" ]; then '
            '[ -z "$(ls -A -- "$p")" ] && echo empty=1; '
            f'echo "foreign=$(find "$p" {skip}! -user {u} -print -quit 2>/dev/null)"; fi; fi; '
            'echo "package=$(dpkg-query -S -- "$p" 2>/dev/null | head -n 1 | cut -d: -f1)"'
        )

    def process(self, output) -> CacheDirStateValue:
        return parse_state(output)


class CacheDirStates(FactBase[list[CacheDirStateValue]]):
    """CacheDirState of each of ``paths`` in one round trip, in their order; a path below
    another given one is left out of that one's ownership scan (it is judged on its own)."""

    def command(self, paths: tuple[str, ...], user: str) -> str:
        single = CacheDirState()
        return "; ".join(
            single.command(path, user, next((p for p in paths if p.startswith(path + "/")), None))
            for path in paths
        )

    def process(self, output) -> list[CacheDirStateValue]:
        blocks: list[list[str]] = []
        for line in output:
            if line.startswith("path="):
                blocks.append([])
            if blocks:
                blocks[-1].append(line)
        return [parse_state(block) for block in blocks]


class HttpStatus(FactBase[int | None]):
    """The HTTP status a GET of ``url`` gets from the host itself within 10 s; None when
    nothing answers. (python3: on every host the roles provision.)"""

    def requires_command(self, url: str) -> str:
        return "python3"

    def command(self, url: str) -> str:
        probe = (
            "import sys, urllib.request, urllib.error\n"
            "try:\n"
            "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
            "except urllib.error.HTTPError as error:\n"
            "    print(error.code)\n"
            "except Exception:\n"
            "    print('none')\n"
        )
        return f"python3 -c {shlex.quote(probe)} {shlex.quote(url)}"

    def process(self, output) -> int | None:
        return parse_last_int(output)


class FileDigests(FactBase[dict[str, str | None]]):
    """sha256 of each of ``paths`` ({path: digest, or None when missing}): lets an operation
    compare rendered content, secrets included, without reading it back."""

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def command(self, paths: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f'for p in {quoted}; do if [ -f "$p" ]; then sha256sum "$p"; else echo "- $p"; fi; done'
        )

    def process(self, output) -> dict[str, str | None]:
        return parse_file_digests(output)


class FileStates(FactBase[dict[str, dict | None]]):
    """Owner, group, octal mode and sha1 of each of ``paths`` that is a regular file (None for
    one that is not: missing, a folder, a link), in one command: what pyinfra's files.put
    reads with three facts a file (File, Sha1File, the parent's Directory) to find a file
    already uploaded (see parse_file_states)."""

    @staticmethod
    def default() -> dict[str, dict | None]:
        return {}

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f"for p in {quoted}; do "
            'if [ -f "$p" ] && [ ! -L "$p" ]; then '
            's=$(sha1sum < "$p") && '
            'printf \'%s\\t%s\\t%s\\n\' "$p" "$(stat -c \'%U %G %a\' -- "$p")" "${s%% *}"; '
            "else printf '%s\\t-\\n' \"$p\"; fi; done; true"
        )

    def process(self, output) -> dict[str, dict | None]:
        return parse_file_states(output)


class PrivateFolder(FactBase[FolderState]):
    """The state of a folder as the user the fact runs as (``path`` relative: to that user's
    home); read unelevated, it is the transfer folder of pyinfra_sglang.host.transfer_folder."""

    def command(self, path: str) -> str:
        return folder_state_command(path)

    def process(self, output) -> FolderState:
        return parse_folder_state(output)


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


class IommuState(FactBase[dict]):
    """IOMMU settings on the kernel command line and whether the kernel runs an IOMMU
    (see parse_iommu_state)."""

    def command(self) -> str:
        return (
            "cat /proc/cmdline; "
            'echo "### iommu_groups=$(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l)"'
        )

    def process(self, output) -> dict:
        return parse_iommu_state(output)


class SystemdUnitState(FactBase[dict[str, str]]):
    """``systemctl show`` properties of one unit: LoadState (``not-found`` when there is no
    such unit), ActiveState, SubState, Result (``start-limit-hit`` after a crash loop),
    NRestarts, ActiveEnterTimestamp."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, unit: str) -> str:
        return (
            "systemctl show -p LoadState -p ActiveState -p SubState -p Result -p NRestarts "
            f"-p ActiveEnterTimestamp {shlex.quote(unit)} 2>/dev/null || true"
        )

    def process(self, output) -> dict[str, str]:
        return parse_systemd_show(output)


# A fact read once a run: pyinfra 3.10 caches no fact (api/facts.py runs the command on every
# ``get_fact``), several roles read the same one (DebPackages, NvidiaGpus, ...), deploy bodies
# read at planning what operations read again at execution, and without -y each operation's
# body runs twice, to plan and to execute. A value read while the host was unchanged is still
# its state while no operation of that host has executed commands since: read_once keeps it
# until then. Kept per host object, so a run's hosts (and a test's) start empty.
_read: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def changes_so_far(host) -> int:
    """How many of ``host``'s operations have executed commands in this run (0 while
    planning): any of them may have changed what a fact reads."""
    state = host.state
    if not state.is_executing:
        return 0
    ops = state.ops.get(host, {})
    return sum(
        1
        for op_data in ops.values()
        if op_data.operation_meta.is_complete() and op_data.operation_meta.executed
    )


def _current(host) -> Host:
    return host._get_module() if isinstance(host, ContextObject) else host


def read_once(host, cls: type[FactBase[T]], **kwargs) -> T:
    """``host.get_fact(cls, **kwargs)``, read from the host only the first time in a run, and
    again after an operation of this host has executed commands (changes_so_far). For an
    operation's body before it yields and for deploy bodies; a loop that waits for the host
    to change (a FunctionCommand) reads with ``host.get_fact``."""
    # Roles pass pyinfra's context proxy for the current host: keep by the host itself.
    this = _current(host)
    if not isinstance(this, Host) or not isinstance(this.state, State):
        return host.get_fact(cls, **kwargs)  # a test's stand-in host: nothing to keep
    host = this
    key = _key(cls, kwargs)
    changes = changes_so_far(host)
    known = _read.setdefault(host, {})
    if key in known and known[key][0] == changes:
        return known[key][1]
    group = _groups.get(host, {}).get(key)
    if group is not None:
        _read_group(host, group, changes, known)
        if key in known and known[key][0] == changes:
            return known[key][1]
    value = host.get_fact(cls, **kwargs)
    known[key] = (changes, value)
    return value


def _key(cls: type[FactBase], kwargs: dict) -> tuple:
    return (cls, repr(sorted(kwargs.items())))


# One member's section in the output of Facts: its start, and its end with its exit status.
_BEGIN = "### pyinfra-sglang fact "
_END = "### pyinfra-sglang fact-rc "
_MISSING = "### pyinfra-sglang no-command"


class Facts(FactBase[list]):
    """Several facts in one command, for read_together: each member ``(fact class, kwargs)``
    runs its own command in a subshell of its own section, and its own process() reads that
    section, as pyinfra's get_fact would (no output: the default; the program that
    ``requires_command`` names missing: the default). A member whose command failed, or
    whose process() raised, is None: read alone, it fails as it would have."""

    _members: tuple = ()

    def command(self, members: tuple[tuple[type[FactBase], dict], ...]) -> StringCommand:
        # pyinfra calls process() on the instance it asked for the command: keep the members.
        self._members = members
        parts: list = []
        for n, (cls, kwargs) in enumerate(members):
            fact = cls()
            command = fact.command(**kwargs)
            needs = fact.requires_command(**kwargs)
            if needs:
                command = StringCommand(
                    "if command -v",
                    shlex.quote(needs),
                    ">/dev/null 2>&1; then (",
                    command,
                    f"); else echo '{_MISSING}'; fi",
                )
            parts += [f"echo '{_BEGIN}{n}'; (", command, f'); echo "{_END}{n} $?";']
        return StringCommand(*parts, "true")

    def process(self, output) -> list:
        sections: dict[int, list[str]] = {}
        status: dict[int, int] = {}
        current = None
        for line in output:
            if line.startswith(_BEGIN):
                current = int(line[len(_BEGIN) :])
                sections[current] = []
            elif line.startswith(_END):
                n, rc = line[len(_END) :].split()
                status[int(n)] = int(rc)
                current = None
            elif current is not None:
                sections[current].append(line)
        values = []
        for n, (cls, _) in enumerate(self._members):
            lines = sections.get(n)
            if lines is None or status.get(n) != 0:
                values.append(None)
                continue
            fact = cls()
            try:
                missing = lines == [_MISSING]
                values.append((fact.default() if missing or not lines else fact.process(lines),))
            except Exception:
                values.append(None)
        return values


class _Members(tuple):
    """Facts' members as pyinfra logs them ("Loaded fact Facts (members=...)"): their names
    and arguments, not their classes' reprs."""

    def __str__(self) -> str:
        return (
            "["
            + ", ".join(
                cls.__name__ + (f"({get_kwargs_str(kwargs)})" if kwargs else "")
                for cls, kwargs in self
            )
            + "]"
        )


# The groups read_together declared, per host: each member's key to the whole group.
_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read_together(host, *members: tuple[type[FactBase], dict]) -> None:
    """Declare ``members`` (``(fact class, kwargs)``: facts of one concern, the same tool or
    the same files) read together: the first read_once of any of them reads all those not
    kept yet in one command, where read_once would send one each, when it is needed: while
    planning if a deploy body reads one, else in the first operation that does (pyinfra runs
    an operation on all hosts at once, but a deploy file host after host). A member that
    failed is left for read_once to read alone."""
    this = _current(host)
    if not isinstance(this, Host) or not isinstance(this.state, State):
        return  # a test's stand-in host: read_once reads each
    group = tuple(members)
    declared = _groups.setdefault(this, {})
    for cls, kwargs in group:
        # The first declaration stands: a deploy body's group is read whole by whichever
        # operation reads one of its members first.
        declared.setdefault(_key(cls, kwargs), group)


def _read_group(host: Host, group: tuple, changes: int, known: dict) -> None:
    """Read the members of ``group`` read_once does not keep (for ``changes``) in one
    command, and keep their values."""
    if not host.connected:
        return  # a test's stand-in host (never connected): read_once reads each
    due = []
    for cls, kwargs in group:
        key = _key(cls, kwargs)
        if not (key in known and known[key][0] == changes) and key not in (k for k, _ in due):
            due.append((key, (cls, kwargs)))
    if len(due) < 2:
        return  # one fact: read_once reads it alone, under its own name
    values = host.get_fact(Facts, members=_Members(member for _, member in due))
    for (key, _), value in zip(due, values or ()):
        if value is not None:
            known[key] = (changes, value[0])


class UnitLeftovers(FactBase[list[str]]):
    """What is left on the host of a systemd ``unit`` and its ``paths``: "enabled" and
    "active" when systemd says so, then each of ``paths`` that exists; [] for none of them.
    One command where checking for a removal would read a fact per file and two for the
    unit."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, unit: str, paths: list[str]) -> str:
        q = shlex.quote
        quoted = " ".join(q(p) for p in paths)
        return (
            f"systemctl is-enabled --quiet {q(unit)} 2>/dev/null && echo enabled; "
            f"systemctl is-active --quiet {q(unit)} 2>/dev/null && echo active; "
            f'for p in {quoted}; do if [ -e "$p" ]; then echo "$p"; fi; done; true'
        )

    def process(self, output) -> list[str]:
        return [line.strip() for line in output if line.strip()]


# --- GPU health (pyinfra_sglang/parsers/gpu_health.py; judged by audit/health.py) ----------

_UNREAD = "### unread"
_NO_DCGMI = "### no dcgmi"
_RC = "### rc="
_XID_TOTAL = "### xid-total "
_XID_READ = "### xid-read "


def _read_or_none(output) -> list[str] | None:
    lines = list(output)
    return None if _UNREAD in (line.strip() for line in lines) else lines


class KernelXids(FactBase[dict | None]):
    """The kernel log's Xid lines of this boot, parsed, and what was read: journald's kernel
    messages of this boot where it has them (kept whole, as the ring buffer is not), else
    dmesg's ring buffer; ``{"events": [...], "read": "<source>, since <first stamp>, N
    lines"}``. None when neither could be read."""

    def command(self) -> str:
        # At most 20 lines per GPU and Xid, not the last N lines: a flood of one Xid (13 and
        # 31 are any GPU user's to cause) never pushes a rarer one (79) out of what is read.
        # Past that, the last line and the total count come at the end ("### xid-total"),
        # then the source, the lines read and the first of them ("### xid-read").
        read = (
            "awk '/^### xid-source / { src = $3; next } /^### unread/ { print; next } "
            "{ if (++lines == 1) first = $0 } /NVRM: Xid/ { k = $0; "
            "if (match($0, /Xid \\([^)]*\\): [0-9]+/)) k = substr($0, RSTART, RLENGTH); "
            "if (++n[k] < 20) print; else last[k] = $0 } "
            f'END {{ for (k in last) print "{_XID_TOTAL}" n[k] " " last[k]; '
            f'if (src != "") print "{_XID_READ}" src " " lines + 0 " " first }}\''
        )
        journal = "journalctl -k -b --no-pager -q -o short-iso"
        return (
            f"{{ if {journal} 2>/dev/null | grep -q .; then echo '### xid-source journald'; "
            f"{journal} 2>/dev/null; elif dmesg >/dev/null 2>&1; then "
            "echo '### xid-source dmesg'; dmesg 2>/dev/null; "
            f"else echo '{_UNREAD}'; fi; }} | {read}; true"
        )

    def process(self, output) -> dict | None:
        lines = _read_or_none(output)
        if lines is None:
            return None
        marked = (_XID_TOTAL, _XID_READ)
        events = list(parse_xid_lines(line for line in lines if not line.startswith(marked)))
        read = None
        for line in lines:
            if line.startswith(_XID_TOTAL):
                total, _, rest = line[len(_XID_TOTAL) :].partition(" ")
                for event in parse_xid_lines([rest]):
                    events.append({**event, "total": int(total) if total.isdigit() else None})
            elif line.startswith(_XID_READ):
                source, _, rest = line[len(_XID_READ) :].partition(" ")
                count, _, first = rest.partition(" ")
                if count.isdigit() and len(count) < 12:
                    read = log_coverage(first, int(count), source)
        return {"events": events, "read": read}


class NvidiaMemoryHealth(FactBase[list | None]):
    """`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` per GPU (parse_health_q); None
    when nvidia-smi could not print it."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT 2>/dev/null || echo '{_UNREAD}'"

    def process(self, output) -> list | None:
        lines = _read_or_none(output)
        return None if lines is None else parse_health_q(lines)


class DcgmDiag(FactBase[dict]):
    """`dcgmi diag -r <level>` (parse_dcgm_diag) where dcgmi is on PATH: {"present": true,
    "level", "rc", "metadata", "tests", "head" (its first lines outside the table)};
    {"present": false, "level"} where it is not (no DCGM: not a problem)."""

    def command(self, level: int) -> str:
        timeout = data.dcgm().diag.timeout_s[str(level)]
        return (
            f"command -v dcgmi >/dev/null 2>&1 || {{ echo '{_NO_DCGMI}'; exit 0; }}; "
            f'timeout {timeout} dcgmi diag -r {int(level)} 2>&1; echo "{_RC}$?"'
        )

    def process(self, output) -> dict:
        lines = list(output)
        if _NO_DCGMI in lines:
            return {"present": False}
        rc = None
        if lines and lines[-1].startswith(_RC):
            rc = int(lines.pop()[len(_RC) :] or 0)
        parsed = parse_dcgm_diag(lines)
        head = [line.strip() for line in lines if line.strip() and line.strip()[0] not in "|+"]
        return {"present": True, "rc": rc, **parsed, "head": head[:5]}


class NvidiaNvlinkErrors(FactBase[dict | None]):
    """`nvidia-smi nvlink -e` error counters (parse_nvlink_errors); {} without links, None
    when nvidia-smi could not print it."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi nvlink -e 2>/dev/null || echo '{_UNREAD}'"

    def process(self, output) -> dict | None:
        lines = _read_or_none(output)
        return None if lines is None else parse_nvlink_errors(lines)
