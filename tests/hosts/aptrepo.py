"""A stand-in for NVIDIA's CUDA apt repository: signed flat repos served over loopback HTTP.

``build_repo()`` builds tiny packages with NVIDIA's real names, versions and dependency
shape (cuda-keyring, branch and exact-version driver pins, the 580, 590 and 595 driver
branches, CUDA 13.0/13.1, DCGM 4 and its exporter, datacenter-gpu-manager-exporter, whose
dcgm-exporter is tests/hosts/dcgm_exporter_standin.py: /metrics of its counters file's
fields for one GPU, on -a/--address) with dpkg-deb, indexes them, and signs each flat repo
with a GPG key made for this build alone.
The driver packages follow each distro's family of names, read from
tests/fixtures/nvidia-repo/shapes.toml (public captures beside it, README.md there).
The key's public half ships in cuda-keyring, as NVIDIA's does, so apt checks signatures
exactly as it would against the real repository. ``serve()`` serves the tree on
127.0.0.1; test hosts share this machine's network namespace and reach it there.

Layout, as NVIDIA's: ``<root>/<distro>/<arch>/`` holds the .debs, Packages, Packages.gz,
Release, Release.gpg and InRelease, used with ``deb [signed-by=...] <url>/<distro>/<arch>/ /``.
"""

from __future__ import annotations

import base64
import email.utils
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import tomllib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

HERE = Path(__file__).resolve().parent
GPU_FIXTURES = HERE.parent / "fixtures" / "gpu"
REPO_SHAPES = HERE.parent / "fixtures" / "nvidia-repo" / "shapes.toml"
NVIDIA_SMI_REPLAY = HERE / "nvidia_smi_replay.py"
DEFAULT_CAPTURE = "h200x2-nvlink-vm"
CAPTURE_FILES = ("smi.txt", "smi_q.txt", "smi_q.xml")

NVIDIA_REPOS_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
KEYRING_VERSION = "1.1-1"
MAINTAINER = "pyinfra-sglang tests <tests@invalid>"

# NVIDIA's arch folder -> (Debian architecture, multiarch triplet).
ARCHES = {"x86_64": ("amd64", "x86_64-linux-gnu"), "sbsa": ("arm64", "aarch64-linux-gnu")}
DISTROS = ("debian12", "ubuntu2204", "ubuntu2404")

# Real versions of NVIDIA's repository (tests/fixtures/nvidia-repo/ubuntu2404-apt-cache-*.txt).
# The pinned branch's newest is what apt installs; 590 has an older release too, for the
# within-branch update (590.44.01 and 590.48.01 are both in NVIDIA's repository).
DRIVER_RELEASES = {
    "580": ("580.126.20-1",),
    "590": ("590.44.01-1", "590.48.01-1"),
    "595": ("595.58.03-1",),
}
DRIVER_VERSIONS = {branch: releases[-1] for branch, releases in DRIVER_RELEASES.items()}
# Each distro folder's family of driver package names.
DRIVER_FAMILY = {"debian12": "debian", "ubuntu2204": "ubuntu", "ubuntu2404": "ubuntu"}


def repo_shapes() -> dict:
    return tomllib.loads(REPO_SHAPES.read_text())


def family_names(family: str, branch: str) -> dict[str, str]:
    """Unsuffixed name -> the package's name on ``branch`` in that family."""
    shapes = repo_shapes()[family]
    suffixed = int(branch) <= shapes.get("last_suffixed_branch", 0)
    return {
        package["name"]: (
            package["suffixed_name"].format(branch=branch)
            if suffixed and "suffixed_name" in package
            else package["name"]
        )
        for package in shapes["package"]
    }


@dataclass(frozen=True)
class CudaRelease:
    release: str  # "13.1"
    nvcc_version: str  # Debian version of cuda-nvcc-X-Y
    toolkit_version: str  # Debian version of cuda-toolkit-X-Y and cuda-X-Y
    built_on: str  # nvcc --version's "Built on" stamp
    compiler_build: str  # nvcc --version's "compiler.<N>_0"

    @property
    def dashed(self) -> str:
        return self.release.replace(".", "-")

    @property
    def nvcc_upstream(self) -> str:
        return self.nvcc_version.rsplit("-", 1)[0]


CUDA_RELEASES = (
    # 13.0's banner is the real one in tests/fixtures/gpu/h200x2-nvlink-vm/smi.txt.
    CudaRelease("13.0", "13.0.88-1", "13.0.0-1", "Wed_Aug_20_01:58:59_PM_PDT_2025", "36424714"),
    CudaRelease("13.1", "13.1.80-1", "13.1.0-1", "Fri_Nov_07_07:21:49_PM_PST_2025", "36836380"),
)


@dataclass(frozen=True)
class DebFile:
    path: str  # where the package installs it, absolute
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class PackageSpec:
    name: str
    version: str
    architecture: str  # a Debian architecture or "all"
    description: str
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: tuple[DebFile, ...] = ()
    conffiles: tuple[str, ...] = ()
    scripts: tuple[tuple[str, bytes], ...] = ()  # maintainer scripts: (postinst, content)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"

    def control(self) -> str:
        installed_kib = sum(-(-len(f.content) // 1024) for f in self.files) or 1
        fields = {
            "Package": self.name,
            "Version": self.version,
            "Architecture": self.architecture,
            "Maintainer": MAINTAINER,
            "Installed-Size": str(installed_kib),
            "Depends": ", ".join(self.depends),
            "Conflicts": ", ".join(self.conflicts),
            "Provides": ", ".join(self.provides),
            "Section": "multiverse/devel",
            "Priority": "optional",
            "Description": f"{self.description} (test double)",
        }
        return "".join(f"{key}: {value}\n" for key, value in fields.items() if value)


@dataclass
class BuiltRepo:
    root: Path
    public_key: Path  # the binary signing key, as cuda-keyring ships it
    repos: list[Path] = field(default_factory=list)  # each <root>/<distro>/<arch>

    def repo(self, distro: str = "debian12", arch: str = "x86_64") -> Path:
        return self.root / distro / arch


@dataclass(frozen=True)
class Mirror:
    """A built repository being served: what tests put in nvidia_apt_mirror."""

    url: str  # http://127.0.0.1:PORT, no trailing slash
    root: Path
    public_key: Path

    def repo_url(self, distro: str = "debian12", arch: str = "x86_64") -> str:
        return f"{self.url}/{distro}/{arch}/"


# ---------------------------------------------------------------------------------------
# Package definitions


def sources_list_line(base_url: str, distro: str, arch: str) -> str:
    return f"deb [signed-by={KEYRING_PATH}] {base_url}/{distro}/{arch}/ /\n"


def script(body: str) -> bytes:
    return f"#!/bin/sh\n# Test double, not NVIDIA's program.\n{body}".encode()


# What NVIDIA's cuda-keyring holds besides the key and the list (`dpkg -L cuda-keyring`):
# an apt pin and a changelog. Its pin's content is not captured: this one matches no release
# of the stand-in (its Label is "NVIDIA CUDA (test double)"), so it changes nothing apt picks.
KEYRING_PIN_PATH = "/etc/apt/preferences.d/cuda-repository-pin-600"
KEYRING_PIN = b"Package: *\nPin: release l=NVIDIA CUDA\nPin-Priority: 600\n"
KEYRING_CHANGELOG = "/usr/share/doc/cuda-keyring/changelog.Debian.gz"
# NVIDIA's build generates a postinst (debian/cuda-keyring.postinst); what it does is not
# captured. This one does nothing visible, but a package with one is what the role must
# handle: dpkg would run it as root.
KEYRING_POSTINST = script("set -e\nexit 0\n")


def keyring_package(distro: str, arch: str, public_key: bytes) -> PackageSpec:
    list_file = f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list"
    changelog = gzip.compress(
        f"cuda-keyring ({KEYRING_VERSION}) stable; urgency=medium\n\n  * Test double.\n".encode(),
        mtime=0,
    )
    return PackageSpec(
        name="cuda-keyring",
        version=KEYRING_VERSION,
        architecture="all",
        description="GPG keyring for the CUDA repository",
        files=(
            DebFile(KEYRING_PATH, public_key),
            DebFile(list_file, sources_list_line(NVIDIA_REPOS_URL, distro, arch).encode()),
            DebFile(KEYRING_PIN_PATH, KEYRING_PIN),
            DebFile(KEYRING_CHANGELOG, changelog),
        ),
        conffiles=(list_file, KEYRING_PIN_PATH),
        scripts=(("postinst", KEYRING_POSTINST),),
    )


# Every pinning package's one file, as NVIDIA's (README.md). apt reads a preferences.d file
# only with no extension or ".pref": "nvidia-driver-pinning-590.44.01" would be ignored.
PIN_FILE = "/etc/apt/preferences.d/nvidia-driver-pin"


def pinning_packages(family: str) -> list[PackageSpec]:
    """Every branch's pin and every release's exact-version pin, all shipping PIN_FILE. The
    real ones conflict through the virtual nvidia-driver-pinning (README.md); here each
    names the others."""
    # name -> (what it pins, its own version)
    pins = {
        f"nvidia-driver-pinning-{branch}": (f"{branch}.*", version)
        for branch, version in DRIVER_VERSIONS.items()
    }
    for releases in DRIVER_RELEASES.values():
        for release in releases:
            upstream = release.rsplit("-", 1)[0]
            pins[f"nvidia-driver-pinning-{upstream}"] = (f"{upstream}-*", release)
    specs = []
    for name, (pattern, version) in pins.items():
        track = name.removeprefix("nvidia-driver-pinning-")
        branch = track.split(".")[0]
        others = [other for other in pins if other != name]
        # The real file's package list is not captured: the family's driver packages.
        pinned = " ".join(family_names(family, branch).values())
        preferences = f"Package: {pinned}\nPin: version {pattern}\nPin-Priority: 1000\n"
        what = f"version {track}" if "." in track else f"branch {track}"
        # Not a conffile: removing one pinning package must take its pin with it.
        specs.append(
            PackageSpec(
                name=name,
                version=version,
                architecture="all",
                description=f"APT driver pinning file for driver {what}",
                conflicts=tuple(others),
                provides=("nvidia-driver-pinning",),
                files=(DebFile(PIN_FILE, preferences.encode()),),
            )
        )
    return specs


def dkms_conf(upstream: str) -> bytes:
    # Enough for a reader to find the module name and version; no module is ever built.
    return f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{upstream}"\nAUTOINSTALL="yes"\n'.encode()


# nvidia-persistenced's unit as NVIDIA packages it for its CUDA repositories:
# NVIDIA/yum-packaging-nvidia-persistenced, nvidia-persistenced.service (branches 570 and main,
# commit fe5d7c890f0dd4bd7881c8355bccab94c8e9ff69; the file last changed in 3249255, 2018):
# After=syslog.target, Type=forking, PIDFile=/var/run/nvidia-persistenced/nvidia-persistenced.pid,
# Restart=always, ExecStart=/usr/bin/nvidia-persistenced --verbose,
# ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced/*, TimeoutSec=300,
# WantedBy=multi-user.target. Upstream's own sample, NVIDIA/nvidia-persistenced tag 590.48.01,
# init/systemd/nvidia-persistenced.service.template, is Type=forking with
# ExecStart=/usr/bin/nvidia-persistenced --user __USER__. The unit of the Debian 12 repository's
# nvidia-persistenced_*.deb that this repository stands in for was not read (no public
# packaging of it was found); the RPM one is copied here. Two differences, on purpose: the
# stand-in daemon stays in the foreground and writes no pid file, so Type=simple and no
# PIDFile= (tests/unit/test_aptrepo.py pins Type=simple and the foreground daemon); the
# Description says "(test double)".
PERSISTENCED_SERVICE = b"""\
[Unit]
Description=NVIDIA Persistence Daemon (test double)
After=syslog.target

[Service]
Type=simple
Restart=always
ExecStart=/usr/bin/nvidia-persistenced --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced/*
TimeoutSec=300

[Install]
WantedBy=multi-user.target
"""


# Fabric Manager's unit, as NVIDIA's package names it (nvidia-fabricmanager.service); the
# stand-in daemon stays running, as nv-fabricmanager does once the fabric is up.
# Source: systemd/nvidia-fabricmanager.service of NVIDIA's redist archive
# fabricmanager-linux-x86_64-<version>-archive, as imported unchanged in
# pexip/os-nvidia-fabricmanager, tags upstream/525.147.05 and upstream/535.216.01 (commit
# e33138fe239be5ffba853e2674f6929ad5e10dd2); NVIDIA/apt-packaging-fabric-manager
# (debian/templates/nvidia-fabricmanager-BRANCH.install.in) installs that file as
# /lib/systemd/system/nvidia-fabricmanager.service. It reads: Description=NVIDIA fabric manager
# service, After= and Requires=network-online.target, User=root, PrivateTmp=false,
# Type=forking, TimeoutStartSec=240, ExecStart= as below, LimitCORE=infinity,
# WantedBy=multi-user.target. Left out here: Requires=/After=network-online.target (it would
# pull the wait for the network into the test containers' boot) and LimitCORE=infinity
# (raising the hard core limit inside a systemd-nspawn container may be refused, failing the
# unit); Type=simple instead of forking because the stand-in daemons here and in
# tests/hosts/ubuntu_archive.py stay in the foreground. From R570 the real unit starts FM
# through a wrapper instead, ExecStartPre=/usr/bin/nvidia-fabricmanager-start.sh --mode precheck
# (spectrocloud/CanvOS#700, https://github.com/spectrocloud/CanvOS/pull/700) and the start.sh
# as ExecStart (its journal lines in NVIDIA/nvtrust#128,
# https://github.com/NVIDIA/nvtrust/issues/128); that unit's full text was not found, and the
# stand-in keeps nv-fabricmanager in ExecStart, which tests/integration/test_fabric_on_hosts.py
# reads (`systemctl show -p ExecStart`).
FABRICMANAGER_SERVICE = b"""\
[Unit]
Description=NVIDIA fabric manager service (test double)

[Service]
User=root
PrivateTmp=false
Type=simple
TimeoutStartSec=240
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg

[Install]
WantedBy=multi-user.target
"""


def fabric_manager_packages(arch: str) -> list[PackageSpec]:
    """nvidia-fabricmanager at every driver release (the unsuffixed name NVIDIA's Ubuntu
    24.04 repository has from R580: nvlink5-580 Depends nvidia-fabricmanager (>= 580) in
    tests/fixtures/nvidia-repo/ubuntu2404-apt-cache-2026-05.txt), shipping a stand-in
    nv-fabricmanager that stays running and the unit."""
    deb_arch = ARCHES[arch][0]
    specs = []
    for releases in DRIVER_RELEASES.values():
        for version in releases:
            upstream = version.rsplit("-", 1)[0]
            daemon = script(
                f'echo "nv-fabricmanager (test double) {upstream}"\nexec sleep infinity\n'
            )
            specs.append(
                PackageSpec(
                    "nvidia-fabricmanager",
                    version,
                    deb_arch,
                    f"Fabric Manager for NVSwitch based systems (test double, {upstream})",
                    files=(
                        DebFile("/usr/bin/nv-fabricmanager", daemon, 0o755),
                        DebFile(
                            "/usr/lib/systemd/system/nvidia-fabricmanager.service",
                            FABRICMANAGER_SERVICE,
                        ),
                    ),
                )
            )
    return specs


# DCGM 4's host engine unit as NVIDIA's package names it (nvidia-dcgm.service); the stand-in
# engine stays running.
DCGM_SERVICE = b"""\
[Unit]
Description=NVIDIA DCGM service (test double)

[Service]
Type=simple
ExecStart=/usr/bin/nv-hostengine -n

[Install]
WantedBy=multi-user.target
"""
# What the stand-in dcgmi prints for `dcgmi diag`: a real DCGM 4 table (its first line, the
# "# source:" URL, left out as dcgmi does not print it).
DCGM_CAPTURE = GPU_FIXTURES / "public" / "dcgmi_diag_dcgm4_software_pass_dcgm253_trimmed.txt"
DCGM_VERSION = "4.2.3-1"  # the DCGM release of that capture


def dcgm_packages(arch: str) -> list[PackageSpec]:
    """datacenter-gpu-manager-4-cuda12 and -cuda13 (data/dcgm.toml), each shipping a dcgmi
    that replays the real `dcgmi diag` table for `diag`, nv-hostengine, and the unit."""
    deb_arch = ARCHES[arch][0]
    table = "".join(
        line
        for line in DCGM_CAPTURE.read_text().splitlines(keepends=True)
        if not line.startswith("# source:")
    )
    dcgmi = script(
        'if [ "$1" = "diag" ]; then\ncat <<\'EOF\'\n' + table + "EOF\nexit 0\nfi\n"
        'echo "dcgmi (test double): only diag is recorded" >&2\nexit 2\n'
    )
    files = (
        DebFile("/usr/bin/dcgmi", dcgmi, 0o755),
        DebFile("/usr/bin/nv-hostengine", script("exec sleep infinity\n"), 0o755),
        DebFile("/usr/lib/systemd/system/nvidia-dcgm.service", DCGM_SERVICE),
    )
    return [
        PackageSpec(
            f"datacenter-gpu-manager-4-cuda{major}",
            DCGM_VERSION,
            deb_arch,
            f"NVIDIA Datacenter GPU Management Tools, CUDA {major}",
            conflicts=tuple(f"datacenter-gpu-manager-4-cuda{m}" for m in (12, 13) if m != major),
            files=files,
        )
        for major in (12, 13)
    ]


# NVIDIA's dcgm-exporter as its host package installs it (dcgm-exporter's packaging: the
# binary, three counters presets under /etc/dcgm-exporter, the unit; docs/sources.md,
# Monitoring). Its unit's shape is the real one's; its ExecStart names no listen address, so
# the exporter listens on every address (":9400") unless a drop-in says otherwise.
DCGM_EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
DCGM_EXPORTER_VERSION = "4.8.2-1"  # as users of NVIDIA's Ubuntu repository list it
DCGM_EXPORTER = HERE / "dcgm_exporter_standin.py"
DCGM_EXPORTER_SERVICE = b"""\
[Unit]
Description=NVIDIA DCGM-exporter service (test double)
Wants=nvidia-dcgm.service
After=nvidia-dcgm.service

[Service]
User=root
PrivateTmp=false

StandardOutput=append:/var/log/dcgm-exporter.log
StandardError=append:/var/log/dcgm-exporter.log

ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv

Restart=on-abort

[Install]
WantedBy=multi-user.target
"""
# The counters file's format (`DCGM field, Prometheus type, help`; '#' comments a line out),
# with the default fields data/monitoring.toml lists (its ECC ones commented out, as there).
DCGM_COUNTERS = b"""\
# Test double: DCGM field, Prometheus metric type, help message
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock (MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock (MHz).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (W).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, PCIe retries.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (%).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (%).
DCGM_FI_DEV_XID_ERRORS, gauge, Last Xid error.
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer free (MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer used (MiB).
# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Single-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Double-bit volatile ECC errors.
"""
DCGM_COUNTER_PRESETS = (
    "default-counters.csv",
    "dcp-metrics-included.csv",
    "1.x-compatibility-metrics.csv",
)


def dcgm_exporter_package(arch: str) -> PackageSpec:
    """datacenter-gpu-manager-exporter: a dcgm-exporter serving the counters file's fields
    (tests/hosts/dcgm_exporter_standin.py), the presets and the unit, at their real paths."""
    presets = tuple(
        DebFile(f"/etc/dcgm-exporter/{name}", DCGM_COUNTERS) for name in DCGM_COUNTER_PRESETS
    )
    return PackageSpec(
        DCGM_EXPORTER_PACKAGE,
        DCGM_EXPORTER_VERSION,
        ARCHES[arch][0],
        "NVIDIA DCGM exporter for Prometheus",
        files=(
            DebFile("/usr/bin/dcgm-exporter", DCGM_EXPORTER.read_bytes(), 0o755),
            *presets,
            DebFile("/lib/systemd/system/nvidia-dcgm-exporter.service", DCGM_EXPORTER_SERVICE),
        ),
        conffiles=tuple(f.path for f in presets),
    )


def replay_files(captures: Iterable[str]) -> list[DebFile]:
    files = [DebFile("/usr/bin/nvidia-smi", NVIDIA_SMI_REPLAY.read_bytes(), 0o755)]
    for capture in captures:
        for name in CAPTURE_FILES:
            source = GPU_FIXTURES / capture / name
            if source.is_file():
                files.append(
                    DebFile(f"/usr/share/nvidia-smi-replay/{capture}/{name}", source.read_bytes())
                )
    return files


def shipped_files(
    kinds: list[str], upstream: str, triplet: str, captures: tuple[str, ...]
) -> list[DebFile]:
    files: list[DebFile] = []
    for kind in kinds:
        if kind == "libcuda":
            files.append(
                DebFile(f"/usr/lib/{triplet}/libcuda.so.{upstream}", b"placeholder for libcuda\n")
            )
        elif kind == "nvidia-smi":
            files += replay_files(captures)
        elif kind == "dkms-source":
            files.append(DebFile(f"/usr/src/nvidia-{upstream}/dkms.conf", dkms_conf(upstream)))
        elif kind == "persistenced":
            files += [
                DebFile("/usr/bin/nvidia-persistenced", script("exec sleep infinity\n"), 0o755),
                DebFile(
                    "/usr/lib/systemd/system/nvidia-persistenced.service", PERSISTENCED_SERVICE
                ),
            ]
        else:
            raise ValueError(f"shapes.toml: unknown 'ships' kind {kind!r}")
    return files


def driver_packages(
    family: str, branch: str, arch: str, captures: Iterable[str], version: str | None = None
) -> list[PackageSpec]:
    """One driver release (the branch's newest unless ``version``) of one family of names,
    from shapes.toml."""
    deb_arch, triplet = ARCHES[arch]
    version = version or DRIVER_VERSIONS[branch]
    upstream = version.rsplit("-", 1)[0]
    names = family_names(family, branch)
    captures = tuple(captures)

    def relation(text: str) -> str:
        head, _, rest = text.format(branch=branch).partition(" ")
        return " ".join(filter(None, (names.get(head, head), rest)))

    return [
        PackageSpec(
            names[package["name"]],
            version,
            deb_arch,
            package["description"],
            depends=tuple(relation(d) for d in package.get("depends", ())),
            conflicts=tuple(relation(c) for c in package.get("conflicts", ())),
            files=tuple(shipped_files(package.get("ships", []), upstream, triplet, captures)),
            scripts=(
                (("postinst", loaded_on_install(upstream)),)
                if "nvidia-smi" in package.get("ships", [])
                else ()
            ),
        )
        for package in repo_shapes()[family]["package"]
    ]


# A test host is a container: no kernel of its own loads the installed module, and a reboot
# does not happen. Where a test asks for it (the file LOAD_ON_INSTALL), the package that
# ships nvidia-smi records its release as the loaded driver, which the replay then reports
# (tests/hosts/nvidia_smi_replay.py, LOADED_DRIVER): the host as after a reboot into it.
LOAD_ON_INSTALL = "/etc/nvidia-smi-replay/load-on-install"
LOADED_DRIVER = "/etc/nvidia-smi-replay/loaded-driver"


def loaded_on_install(upstream: str) -> bytes:
    return script(
        f"set -e\nif [ -e {LOAD_ON_INSTALL} ]; then echo {upstream} > {LOADED_DRIVER}; fi\n"
    )


def nvcc_script(cuda: CudaRelease) -> bytes:
    banner = (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Copyright (c) 2005-2025 NVIDIA Corporation\n"
        f"Built on {cuda.built_on}\n"
        f"Cuda compilation tools, release {cuda.release}, V{cuda.nvcc_upstream}\n"
        f"Build cuda_{cuda.release}.r{cuda.release}/compiler.{cuda.compiler_build}_0\n"
    )
    return script(
        'if [ "$1" = "--version" ] || [ "$1" = "-V" ]; then\n'
        f"cat <<'EOF'\n{banner}EOF\nexit 0\nfi\n"
        'echo "nvcc (test double): only --version is supported" >&2\nexit 2\n'
    )


def cuda_packages(cuda: CudaRelease, arch: str) -> list[PackageSpec]:
    deb_arch = ARCHES[arch][0]
    prefix = f"/usr/local/cuda-{cuda.release}"
    nvcc = f"cuda-nvcc-{cuda.dashed}"
    toolkit = f"cuda-toolkit-{cuda.dashed}"
    return [
        PackageSpec(
            nvcc,
            cuda.nvcc_version,
            deb_arch,
            f"CUDA nvcc {cuda.release}",
            files=(
                DebFile(f"{prefix}/bin/nvcc", nvcc_script(cuda), 0o755),
                DebFile(f"{prefix}/lib64/libcudart.so.13", b"placeholder for libcudart\n"),
            ),
        ),
        # The toolkit alone: no driver dependency, what a host with its own driver wants.
        PackageSpec(
            toolkit,
            cuda.toolkit_version,
            deb_arch,
            f"CUDA Toolkit {cuda.release} meta-package",
            depends=(f"{nvcc} (>= {cuda.nvcc_upstream})",),
        ),
        # NVIDIA's everything-metapackage: it pulls cuda-drivers, which the product avoids.
        PackageSpec(
            f"cuda-{cuda.dashed}",
            cuda.toolkit_version,
            deb_arch,
            f"CUDA {cuda.release} meta-package",
            depends=(f"{toolkit} (= {cuda.toolkit_version})", "cuda-drivers"),
        ),
    ]


def package_specs(
    distro: str, arch: str, public_key: bytes, captures: Iterable[str] = (DEFAULT_CAPTURE,)
) -> list[PackageSpec]:
    """Every package of one flat repo."""
    if distro not in DISTROS or arch not in ARCHES:
        known = f"{', '.join(DISTROS)} x {', '.join(ARCHES)}"
        raise ValueError(f"unknown distro/arch {distro}/{arch}; known: {known}")
    captures = tuple(captures)
    family = DRIVER_FAMILY[distro]
    specs = [keyring_package(distro, arch, public_key), *pinning_packages(family)]
    for branch, releases in DRIVER_RELEASES.items():
        for version in releases:
            specs += driver_packages(family, branch, arch, captures, version)
    specs += fabric_manager_packages(arch)
    specs += dcgm_packages(arch)
    specs.append(dcgm_exporter_package(arch))
    for cuda in CUDA_RELEASES:
        specs += cuda_packages(cuda, arch)
    return specs


# ---------------------------------------------------------------------------------------
# Building


def stage_tree(spec: PackageSpec, stage: Path) -> None:
    """The package's file tree plus DEBIAN/, with the modes dpkg-deb will record."""
    debian = stage / "DEBIAN"
    debian.mkdir(parents=True)
    (debian / "control").write_text(spec.control())
    if spec.conffiles:
        (debian / "conffiles").write_text("".join(f"{path}\n" for path in spec.conffiles))
    for item in spec.files:
        target = stage / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.content)
        target.chmod(item.mode)
    for path in [stage, *stage.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)  # not whatever the caller's umask left
    for path in debian.iterdir():
        path.chmod(0o644)
    for name, content in spec.scripts:
        (debian / name).write_bytes(content)
        (debian / name).chmod(0o755)  # dpkg-deb refuses a maintainer script it cannot run


def build_deb(spec: PackageSpec, out_dir: Path, work_dir: Path) -> Path:
    stage = work_dir / spec.filename.removesuffix(".deb")
    stage_tree(spec, stage)
    deb = out_dir / spec.filename
    # gzip: tiny packages build faster than with the default xz, and every dpkg reads it.
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", "-Zgzip", str(stage), str(deb)],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(stage)
    return deb


def index_stanza(spec: PackageSpec, deb: Path) -> str:
    data = deb.read_bytes()
    return (
        spec.control()
        + f"Filename: ./{deb.name}\n"
        + f"Size: {len(data)}\n"
        + f"MD5sum: {hashlib.md5(data).hexdigest()}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def write_packages_index(repo: Path, built: list[tuple[PackageSpec, Path]]) -> None:
    text = "\n".join(index_stanza(spec, deb) for spec, deb in built).encode()
    (repo / "Packages").write_bytes(text)
    # mtime=0: the same packages give the same Packages.gz.
    (repo / "Packages.gz").write_bytes(gzip.compress(text, mtime=0))


def release_text(repo: Path, arch: str, now: datetime) -> str:
    indexes = [repo / "Packages", repo / "Packages.gz"]

    def hashes(algorithm: str) -> str:
        return "".join(
            f" {hashlib.new(algorithm, p.read_bytes()).hexdigest()} {p.stat().st_size} {p.name}\n"
            for p in indexes
        )

    return (
        "Origin: NVIDIA\n"
        "Label: NVIDIA CUDA (test double)\n"
        f"Architectures: {ARCHES[arch][0]}\n"
        f"Date: {email.utils.format_datetime(now, usegmt=True)}\n"
        f"MD5Sum:\n{hashes('md5')}"
        f"SHA256:\n{hashes('sha256')}"
    )


class SigningKey:
    """A passphrase-less GPG key in a private GNUPGHOME, made for one build and then removed."""

    def __init__(self) -> None:
        # Under /tmp, not tmp_path: gpg-agent's socket path must stay short.
        self.home = Path(tempfile.mkdtemp(prefix="aptrepo-gpg-"))
        self.home.chmod(0o700)
        self._gpg(
            "--passphrase",
            "",
            "--quick-generate-key",
            "pyinfra-sglang test CUDA repository <cuda-repo@tests.invalid>",
            "ed25519",
            "sign",
            "never",
        )
        listing = self._gpg("--with-colons", "--list-secret-keys").stdout.decode()
        self.fingerprint = next(
            line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")
        )

    def _gpg(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["gpg", "--homedir", str(self.home), "--batch", "--pinentry-mode", "loopback", *args],
            check=True,
            capture_output=True,
        )

    def public_key(self) -> bytes:
        """Binary (not armored), the format apt's signed-by= files and gpgv --keyring read."""
        return self._gpg("--export", self.fingerprint).stdout

    def sign_release(self, repo: Path) -> None:
        release = str(repo / "Release")
        common = ("--yes", "--local-user", self.fingerprint, "--digest-algo", "SHA512")
        self._gpg(
            *common, "--armor", "--detach-sign", "--output", str(repo / "Release.gpg"), release
        )
        self._gpg(*common, "--clearsign", "--output", str(repo / "InRelease"), release)

    def close(self) -> None:
        # Stop the agent gpg started for this home only, then drop the secret key.
        subprocess.run(
            ["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_flat_repo(
    root: Path, distro: str, arch: str, key: SigningKey, captures: Iterable[str], now: datetime
) -> Path:
    repo = root / distro / arch
    repo.mkdir(parents=True, exist_ok=True)
    specs = package_specs(distro, arch, key.public_key(), captures)
    with tempfile.TemporaryDirectory(prefix="aptrepo-stage-") as work, ThreadPoolExecutor() as pool:
        debs = list(pool.map(lambda spec: build_deb(spec, repo, Path(work)), specs))
    write_packages_index(repo, list(zip(specs, debs)))
    (repo / "Release").write_text(release_text(repo, arch, now))
    key.sign_release(repo)
    return repo


def build_repo(
    root: Path,
    targets: Iterable[tuple[str, str]] = (("debian12", "x86_64"),),
    captures: Iterable[str] = (DEFAULT_CAPTURE,),
) -> BuiltRepo:
    """Build one signed flat repo per (distro, arch) under root, all signed by one new key.

    The public key is also written to <root>/cuda-archive-keyring.gpg for tests to verify with.
    """
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    with SigningKey() as key:
        public_key = root / "cuda-archive-keyring.gpg"
        public_key.write_bytes(key.public_key())
        built = BuiltRepo(root=root, public_key=public_key)
        for distro, arch in targets:
            built.repos.append(build_flat_repo(root, distro, arch, key, tuple(captures), now))
    return built


# ---------------------------------------------------------------------------------------
# Serving


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    # "user:password" a client must send (HTTP basic auth), as a private mirror asks; None:
    # anyone may read.
    credentials: str | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass  # apt fetches a lot; the test output is not the place for an access log

    def send_head(self):  # GET and HEAD
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(self.credentials.encode()).decode()
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="pyinfra-sglang tests"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        return super().send_head()


@contextmanager
def serve(root: Path, credentials: tuple[str, str] | None = None) -> Iterator[str]:
    """Serve root over HTTP on 127.0.0.1, on a free port; yields the base URL (no trailing /).
    ``credentials`` (user, password): every request must carry them (HTTP basic auth)."""
    handler_class = QuietHandler
    if credentials is not None:
        handler_class = type(
            "PrivateHandler", (QuietHandler,), {"credentials": ":".join(credentials)}
        )
    handler = functools.partial(handler_class, directory=os.fspath(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="nvidia-mirror", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
