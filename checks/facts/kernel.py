"""Facts of the kernel and the platform: virtualization, PCIe ACS, IOMMU, kernel headers,
DKMS, Secure Boot, memory."""

from __future__ import annotations

import re
import shlex

from pyinfra.api import FactBase

from pyinfra_sglang import data
from pyinfra_sglang.driver.secure_boot import parse_mok_enrolled, parse_secure_boot_state
from pyinfra_sglang.parsers.pcie_acs import PcieAcsDict, parse_pcie_acs
from pyinfra_sglang.parsers.system import (
    DkmsStateDict,
    KernelHeadersDict,
    MemoryInfoDict,
    VirtualizationDict,
    parse_dkms_state,
    parse_iommu_state,
    parse_kernel_headers,
    parse_meminfo,
    parse_virtualization,
)


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


class MemoryInfo(FactBase[MemoryInfoDict]):
    """Total and available memory from /proc/meminfo (see parse_meminfo)."""

    def command(self) -> str:
        return "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"

    def process(self, output) -> MemoryInfoDict:
        return parse_meminfo(output)


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
