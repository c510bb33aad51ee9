"""Stand-ins for a provider's driver from Ubuntu's own archive (not NVIDIA's repository):
the 580-server branch and Fabric Manager, with the names, revision form and relations
packages.ubuntu.com lists (tests/fixtures/ubuntu-archive/). Ubuntu's archive cannot be
reached from here, and a test host is Debian: the packages are built with dpkg-deb and
installed with dpkg, as a provider's image would hold them.

The relations are those the listings show, cut to the packages built here (the real
metapackage lists more libraries, the real libraries more system libraries).
nvidia-utils-580-server ships the nvidia-smi replay double, whose capture is the real H200
machine's: it reports driver 580.159.04, so the packages carry that upstream release in
noble's revision form (noble's own is 580.159.03-0ubuntu0.24.04.1): Fabric Manager must be
at the driver's exact release."""

from __future__ import annotations

from pathlib import Path

from tests.hosts.aptrepo import (
    ARCHES,
    CUDA_RELEASES,
    FABRICMANAGER_SERVICE,
    DebFile,
    PackageSpec,
    build_deb,
    cuda_packages,
    replay_files,
    script,
)

BRANCH = "580"
UPSTREAM = "580.159.04"
VERSION = f"{UPSTREAM}-0ubuntu0.24.04.1"
COMMON = f"nvidia-kernel-common-{BRANCH}-server"
COMPUTE = f"libnvidia-compute-{BRANCH}-server"
UTILS = f"nvidia-utils-{BRANCH}-server"
DRIVER = f"nvidia-driver-{BRANCH}-server"
FABRIC_MANAGER = f"nvidia-fabricmanager-{BRANCH}"
NAMES = (COMMON, COMPUTE, UTILS, DRIVER, FABRIC_MANAGER)


def driver_specs(captures: tuple[str, ...] = ("h200x2-nvlink-vm",)) -> list[PackageSpec]:
    deb_arch, triplet = ARCHES["x86_64"]
    virtual_common = f"{COMMON}-{UPSTREAM}"
    return [
        PackageSpec(
            COMMON,
            VERSION,
            deb_arch,
            "Shared files used with the kernel module",
            provides=(virtual_common,),
        ),
        PackageSpec(
            COMPUTE,
            VERSION,
            deb_arch,
            "NVIDIA libcompute package",
            depends=(virtual_common,),
            files=(
                DebFile(f"/usr/lib/{triplet}/libcuda.so.{UPSTREAM}", b"placeholder for libcuda\n"),
            ),
        ),
        PackageSpec(
            UTILS,
            VERSION,
            deb_arch,
            "NVIDIA Server Driver support binaries",
            depends=(f"{COMPUTE} (>= {UPSTREAM})", virtual_common),
            files=tuple(replay_files(captures)),
        ),
        PackageSpec(
            DRIVER,
            VERSION,
            deb_arch,
            "NVIDIA Server Driver metapackage",
            depends=(f"{COMPUTE} (= {VERSION})", f"{UTILS} (= {VERSION})"),
        ),
        PackageSpec(
            FABRIC_MANAGER,
            VERSION,
            deb_arch,
            "Fabric Manager for NVSwitch based systems.",
            depends=(virtual_common,),
            files=(
                DebFile("/usr/bin/nv-fabricmanager", script("exec sleep infinity\n"), 0o755),
                DebFile(
                    "/usr/lib/systemd/system/nvidia-fabricmanager.service", FABRICMANAGER_SERVICE
                ),
            ),
        ),
    ]


def build(out_dir: Path, cuda_release: str = "13.0") -> list[Path]:
    """The driver packages and a CUDA toolkit's stand-in (the provider's image has one),
    as .deb files in ``out_dir``, in an order dpkg -i takes them."""
    cuda = next(release for release in CUDA_RELEASES if release.release == cuda_release)
    work = out_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    # nvcc and the toolkit metapackage; NVIDIA's cuda-X-Y would pull cuda-drivers.
    toolkit = [p for p in cuda_packages(cuda, "x86_64") if p.name != f"cuda-{cuda.dashed}"]
    specs = [*driver_specs(), *toolkit]
    return [build_deb(spec, out_dir, work) for spec in specs]
