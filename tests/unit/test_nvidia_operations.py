"""Command generation of the NVIDIA repo, driver and CUDA roles from pyinfra fact inputs,
and the reboot decision (loaded vs installed version in, reboot or "reboot required" out)."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.server import Command, Which

from checks.facts import (
    AptSourceEntries,
    NvccRelease,
    NvidiaGpus,
    NvidiaLoadedModule,
    Virtualization,
)
from pyinfra_sglang import data
from pyinfra_sglang.driver.nvidia import (
    all_kernel_module_packages,
    cuda_paths,
    driver_branch_of,
    driver_packages,
    kernel_module_packages,
    packages_off_branch,
    upstream_version,
)
from pyinfra_sglang.inventory import HostConfig
from roles.cuda_toolkit import nvcc_reports_release
from roles.nvidia_driver import (
    decide_driver_reboot,
    driver_branch_pin,
    driver_packages_on_branch,
    driver_reboot,
    rebuild_initramfs,
    stale_driver_packages,
)
from roles.nvidia_repo import (
    apt_components,
    installed_keys_command,
    keyring_check,
    keyring_installed,
    keyring_unpacked,
)
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

# Debian 12's compute install with open modules (data/nvidia.toml, family "debian").
COMPUTE_OPEN = [("nvidia-driver-cuda",), ("nvidia-kernel-open-dkms",), ("nvidia-persistenced",)]
NAMES = [name for (name,) in COMPUTE_OPEN]
ON_590 = {p: ["590.48.01-1"] for p in NAMES}
ON_595 = {p: ["595.58.03-1"] for p in NAMES}
NO_CONTAINER = {"container": None, "vm": None}

# pyinfra's non-interactive apt-get, waiting for dpkg's locks, which the driver operations
# yield.
APT_GET = (
    "DEBIAN_FRONTEND=noninteractive apt-get -y "
    '-o Dpkg::Options::="--force-confdef" -o Dpkg::Options::="--force-confold" '
    f"-o DPkg::Lock::Timeout={data.apt().lock_timeout_s}"
)


def resolved(
    index: int, names: str, missing: str, branch: int = 590, version: str | None = None
) -> str:
    """The shell that picks the first of ``names`` apt has a version on ``branch`` (exactly
    ``version``) of."""
    track = version.replace(".", "\\.") + "-" if version else f"{branch}\\."
    wanted = f"driver {version}" if version else f"driver branch {branch}"
    return (
        f'pkg{index}=; for name in {names}; do if apt-cache policy "$name" 2>/dev/null | '
        f"sed -n 's/^ *Candidate: //p' | grep -Eq '^([0-9]+:)?{track}'; then "
        f'pkg{index}=$name; break; fi; done; [ -n "$pkg{index}" ] || {{ echo \'{missing}: apt '
        f"has no version on {wanted} in the configured repositories (is the "
        "NVIDIA repository or its mirror complete?)' >&2; exit 100; }"
    )


def install_compute_open(branch: int = 590, moving: str = "", version: str | None = None) -> str:
    picks = "; ".join(resolved(i, name, name, branch, version) for i, name in enumerate(NAMES))
    return (
        f"{picks}; {APT_GET} install --no-install-recommends --allow-downgrades "
        f'"$pkg0" "$pkg1" "$pkg2"{moving}'
    )


INSTALL_COMPUTE_OPEN = install_compute_open()
NVCC = "/usr/local/cuda-13.1/bin/nvcc"
KEYRING_URL = "http://127.0.0.1:8080/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
# Downloaded into a root-only folder, never a predictable name in /tmp.
DOWNLOADS = "/var/lib/pyinfra-sglang/downloads"
KEYRING_DEB = f"{DOWNLOADS}/cuda-keyring.deb"
NVIDIA_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"
KEYRING_ARGS = {
    "package": "cuda-keyring",
    "src": KEYRING_URL,
    "sha256": "ab" * 32,
    "fingerprint": NVIDIA_KEY,
    "keyring_path": "/usr/share/keyrings/cuda-archive-keyring.gpg",
    "download_dir": DOWNLOADS,
}


def reboot_facts(loaded, installed, container=None, marked=False):
    return {
        NvidiaLoadedModule: {"version": loaded, "flavor": "open"} if loaded else None,
        DebPackages: {"nvidia-kernel-open-dkms": [installed]} if installed else {},
        Virtualization: {"container": container, "vm": None},
        File: {"mode": 644} if marked else None,
    }


REBOOT_ARGS = {
    "module_packages": ("nvidia-kernel-open-dkms",),
    "allow_reboot": False,
    "changing": False,
}


def entry(file, line, components, fmt="one-line"):
    return {
        "file": file,
        "line": line,
        "format": fmt,
        "uris": ["http://deb.debian.org/debian"],
        "components": components,
    }


CASES = [
    # -- the branch pin -----------------------------------------------------------------------
    op_case(
        driver_branch_pin,
        "installed-first-time",
        {DebPackages: {}},
        {"branch": 590},
        commands=[f"{APT_GET} install nvidia-driver-pinning-590"],
    ),
    op_case(
        driver_branch_pin,
        "swap-replaces-the-other-branch-in-one-transaction",
        {DebPackages: {"nvidia-driver-pinning-590": ["590.48.01-1"], **ON_590}},
        {"branch": 595},
        commands=[f"{APT_GET} install nvidia-driver-pinning-595 nvidia-driver-pinning-590-"],
    ),
    op_case(
        driver_branch_pin,
        "in-place-is-a-noop",
        {DebPackages: {"nvidia-driver-pinning-590": ["590.48.01-1"]}},
        {"branch": 590},
        noops=["nvidia-driver-pinning-590 is installed"],
    ),
    # -- an exact release (nvidia_driver_version): NVIDIA's nvidia-driver-pinning-<version> --
    op_case(
        driver_branch_pin,
        "an-exact-version-swaps-out-the-branch-pin",
        {DebPackages: {"nvidia-driver-pinning-590": ["590.48.01-1"], **ON_590}},
        {"branch": 590, "version": "590.44.01"},
        commands=[f"{APT_GET} install nvidia-driver-pinning-590.44.01 nvidia-driver-pinning-590-"],
    ),
    op_case(
        driver_branch_pin,
        "the-exact-version-pin-in-place-is-a-noop",
        {DebPackages: {"nvidia-driver-pinning-590.44.01": ["590.44.01-1"]}},
        {"branch": 590, "version": "590.44.01"},
        noops=["nvidia-driver-pinning-590.44.01 is installed"],
    ),
    op_case(
        driver_branch_pin,
        "back-to-the-branch-drops-the-exact-version-pin",
        {DebPackages: {"nvidia-driver-pinning-590.44.01": ["590.44.01-1"]}},
        {"branch": 590},
        commands=[f"{APT_GET} install nvidia-driver-pinning-590 nvidia-driver-pinning-590.44.01-"],
    ),
    op_case(
        driver_packages_on_branch,
        "another-release-of-the-branch-moves-to-the-exact-version",
        {DebPackages: {**ON_590, "nvidia-open": ["590.48.01-1"]}},
        {"entries": COMPUTE_OPEN, "branch": 590, "version": "590.44.01"},
        commands=[install_compute_open(590, " nvidia-open", version="590.44.01")],
    ),
    op_case(
        driver_packages_on_branch,
        "at-the-exact-version-is-a-noop",
        {DebPackages: {p: ["590.44.01-1"] for p in NAMES}},
        {"entries": COMPUTE_OPEN, "branch": 590, "version": "590.44.01"},
        noops=["nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-persistenced at 590.44.01"],
    ),
    # -- the driver packages follow the branch ------------------------------------------------
    op_case(
        driver_packages_on_branch,
        "fresh",
        {DebPackages: {}},
        {"entries": COMPUTE_OPEN, "branch": 590},
        commands=[INSTALL_COMPUTE_OPEN],
    ),
    op_case(
        driver_packages_on_branch,
        "the-distributions-driver-purged-first-then-nvidias",
        {
            DebPackages: {
                "nvidia-driver-580-server": ["580.159.03-0ubuntu0.24.04.1"],
                "nvidia-utils-580-server": ["580.159.03-0ubuntu0.24.04.1"],
            }
        },
        {
            "entries": COMPUTE_OPEN,
            "branch": 590,
            "removing": ("nvidia-driver-580-server", "nvidia-utils-580-server"),
            "removing_dkms": ("nvidia/575.64",),
        },
        commands=[
            f"{APT_GET} purge nvidia-driver-580-server nvidia-utils-580-server",
            "dkms remove nvidia/575.64 --all",
            INSTALL_COMPUTE_OPEN,
        ],
    ),
    op_case(
        driver_packages_on_branch,
        "only-orphaned-dkms-modules-to-remove",
        {DebPackages: ON_590},
        {"entries": COMPUTE_OPEN, "branch": 590, "removing_dkms": ("nvidia/575.64",)},
        commands=["dkms remove nvidia/575.64 --all"],
    ),
    op_case(
        driver_packages_on_branch,
        "in-place",
        {DebPackages: ON_590},
        {"entries": COMPUTE_OPEN, "branch": 590},
        noops=["nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-persistenced on branch 590"],
    ),
    op_case(
        driver_packages_on_branch,
        "down-to-590",
        {DebPackages: ON_595},
        {"entries": COMPUTE_OPEN, "branch": 590},
        commands=[INSTALL_COMPUTE_OPEN],
    ),
    op_case(
        driver_packages_on_branch,
        "up-to-595",
        {DebPackages: ON_590},
        {"entries": COMPUTE_OPEN, "branch": 595},
        commands=[install_compute_open(595)],
    ),
    op_case(
        # Before: only the named packages moved; a metapackage (>= deps) and a library of
        # the old branch stayed, and apt counted them satisfied.
        driver_packages_on_branch,
        "a-move-takes-every-driver-package-of-another-branch-along",
        {
            DebPackages: {
                **ON_595,
                "nvidia-open": ["595.58.03-1"],
                "libnvidia-gl": ["595.58.03-1"],
                "nvidia-driver-pinning-590": ["590.48.01-1"],
                "nvidia-container-toolkit": ["1.17.8-1"],
            }
        },
        {"entries": COMPUTE_OPEN, "branch": 590},
        commands=[install_compute_open(590, " libnvidia-gl nvidia-open")],
    ),
    op_case(
        driver_packages_on_branch,
        "a-leftover-of-another-branch-alone-is-moved",
        {DebPackages: {**ON_590, "nvidia-open": ["595.58.03-1"]}},
        {"entries": COMPUTE_OPEN, "branch": 590},
        commands=[install_compute_open(590, " nvidia-open")],
    ),
    # -- the reboot: "reboot required" marks the host once; an allowed reboot reboots and waits
    op_case(
        driver_reboot,
        "reboot-required-marks-the-host",
        reboot_facts("580.159.04", "590.48.01-1"),
        REBOOT_ARGS,
        commands=[
            "touch /run/reboot-required && echo nvidia-kernel-open-dkms "
            ">> /run/reboot-required.pkgs"
        ],
    ),
    op_case(
        driver_reboot,
        "reboot-required-marked-already",
        reboot_facts("580.159.04", "590.48.01-1", marked=True),
        REBOOT_ARGS,
        noops=[
            "already marked reboot-required: "
            "the kernel has 580.159.04 loaded, 590.48.01 is installed"
        ],
    ),
    op_case(
        driver_reboot,
        "allowed-reboot-reboots-and-waits",
        reboot_facts("580.159.04", "590.48.01-1"),
        {**REBOOT_ARGS, "allow_reboot": True},
        commands=[
            "touch /run/pyinfra-sglang-reboot-pending && "
            "( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &",
            "FunctionCommand(_wait_for_reboot, (), {'timeout': 1800, 'interval': 2})",
        ],
    ),
    op_case(
        driver_reboot,
        "allowed-reboot-waits-the-inventorys-reboot-timeout",
        reboot_facts("580.159.04", "590.48.01-1"),
        {**REBOOT_ARGS, "allow_reboot": True, "reboot_timeout_s": 3600},
        commands=[
            "touch /run/pyinfra-sglang-reboot-pending && "
            "( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &",
            "FunctionCommand(_wait_for_reboot, (), {'timeout': 3600, 'interval': 2})",
        ],
    ),
    op_case(
        driver_reboot,
        "container-never-reboots-for-the-driver",
        reboot_facts(None, "590.48.01-1", container="systemd-nspawn"),
        {**REBOOT_ARGS, "allow_reboot": True, "changing": True},
        noops=["in a container (systemd-nspawn) the outer host loads the kernel module"],
    ),
    # -- initramfs ----------------------------------------------------------------------------
    op_case(
        rebuild_initramfs,
        "rebuilt",
        {Virtualization: NO_CONTAINER, Which: "/usr/sbin/update-initramfs"},
        commands=["update-initramfs -u"],
    ),
    op_case(
        rebuild_initramfs,
        "not-installed",
        {Virtualization: NO_CONTAINER, Which: None},
        noops=["update-initramfs is not installed: no initramfs to rebuild"],
    ),
    op_case(
        rebuild_initramfs,
        "container",
        {Virtualization: {"container": "lxc", "vm": None}, Which: "/usr/sbin/update-initramfs"},
        noops=["in a container (lxc) the outer host boots the kernel"],
    ),
    # -- apt components -----------------------------------------------------------------------
    op_case(
        apt_components,
        "contrib-is-added-where-main-is",
        {
            AptSourceEntries: [
                entry("/etc/apt/sources.list", 1, ["main"]),
                entry("/etc/apt/sources.list", 2, ["main", "contrib"]),
                entry(
                    "/etc/apt/sources.list.d/debian.sources",
                    4,
                    ["main", "non-free-firmware"],
                    "deb822",
                ),
                entry("/etc/apt/sources.list.d/other.list", 1, ["stable"]),
            ]
        },
        {"components": ["contrib"]},
        commands=[
            "sed -i '1s/[[:space:]]*$/ contrib/' /etc/apt/sources.list",
            "sed -i '4s/[[:space:]]*$/ contrib/' /etc/apt/sources.list.d/debian.sources",
        ],
    ),
    op_case(
        apt_components,
        "a-source-file-read-from-the-host-is-quoted",
        {AptSourceEntries: [entry("/etc/apt/sources.list.d/a b;touch x.list", 3, ["main"])]},
        {"components": ["contrib"]},
        commands=["sed -i '3s/[[:space:]]*$/ contrib/' '/etc/apt/sources.list.d/a b;touch x.list'"],
    ),
    op_case(
        apt_components,
        "contrib-present-is-a-noop",
        {AptSourceEntries: [entry("/etc/apt/sources.list", 1, ["main", "contrib"])]},
        {"components": ["contrib"]},
        noops=["apt sources already have contrib"],
    ),
    # -- cuda-keyring: downloaded root-only, checked, then installed by apt-get ------------
    op_case(
        keyring_installed,
        "downloaded-checked-then-installed-with-apt-get",
        {DebPackages: {}},
        KEYRING_ARGS,
        commands=[
            f"install -d -m 700 -o root -g root {DOWNLOADS}",
            f"curl -fsSL --proto =http,https -o {KEYRING_DEB} {KEYRING_URL}",
            f"actual=$(sha256sum {KEYRING_DEB} | cut -d' ' -f1); "
            f'[ "$actual" = {"ab" * 32} ] || {{ echo "the downloaded keyring\'s sha256 is '
            f'$actual, expected {"ab" * 32}: not installing it" >&2; rm -f {KEYRING_DEB}; '
            "exit 1; }",
            f"{APT_GET} install {KEYRING_DEB}",
            f"rm -f {KEYRING_DEB}",
        ],
    ),
    op_case(
        keyring_installed,
        "https-may-not-be-redirected-to-http",
        {DebPackages: {}},
        {**KEYRING_ARGS, "src": "https://mirror.example/debian12/x86_64/cuda-keyring.deb"},
        commands=[
            f"install -d -m 700 -o root -g root {DOWNLOADS}",
            f"curl -fsSL --proto =https -o {KEYRING_DEB} "
            "https://mirror.example/debian12/x86_64/cuda-keyring.deb",
            keyring_check(KEYRING_DEB, "ab" * 32, NVIDIA_KEY, KEYRING_ARGS["keyring_path"]),
            f"{APT_GET} install {KEYRING_DEB}",
            f"rm -f {KEYRING_DEB}",
        ],
    ),
    op_case(
        keyring_installed,
        "installed-is-a-noop-without-a-download",
        {DebPackages: {"cuda-keyring": ["1.1-1"]}},
        KEYRING_ARGS,
        noops=["cuda-keyring is installed"],
    ),
    # No sha256 pinned: dpkg never sees the .deb (NVIDIA's carries a postinst); its key file
    # alone is installed once checked.
    op_case(
        keyring_installed,
        "unpinned-unpacked-checked-key-file-installed-no-dpkg",
        {DebPackages: {}, Command: ""},
        {**KEYRING_ARGS, "sha256": None, "allowed_files": [KEYRING_ARGS["keyring_path"]]},
        commands=[
            f"install -d -m 700 -o root -g root {DOWNLOADS}",
            f"curl -fsSL --proto =http,https -o {KEYRING_DEB} {KEYRING_URL}",
            keyring_unpacked(
                KEYRING_DEB,
                f"{DOWNLOADS}/cuda-keyring.d",
                NVIDIA_KEY,
                KEYRING_ARGS["keyring_path"],
                [KEYRING_ARGS["keyring_path"]],
            ),
            f"install -D -m 644 -o root -g root {DOWNLOADS}/cuda-keyring.d/root/usr/share/"
            "keyrings/cuda-archive-keyring.gpg /usr/share/keyrings/cuda-archive-keyring.gpg "
            f"&& rm -rf {DOWNLOADS}/cuda-keyring.d {KEYRING_DEB}",
        ],
    ),
    op_case(
        keyring_installed,
        "unpinned-nvidias-key-alone-in-place-is-a-noop",
        {
            DebPackages: {},
            Command: lambda command: (
                NVIDIA_KEY
                if command == installed_keys_command(KEYRING_ARGS["keyring_path"])
                else ""
            ),
        },
        {**KEYRING_ARGS, "sha256": None},
        noops=[
            f"/usr/share/keyrings/cuda-archive-keyring.gpg holds NVIDIA's key {NVIDIA_KEY} alone"
        ],
    ),
    op_case(
        keyring_installed,
        "unpinned-a-second-key-in-place-is-replaced",
        {DebPackages: {}, Command: f"{NVIDIA_KEY}\n{'0' * 40}"},
        {**KEYRING_ARGS, "sha256": None, "allowed_files": []},
        commands=[
            f"install -d -m 700 -o root -g root {DOWNLOADS}",
            f"curl -fsSL --proto =http,https -o {KEYRING_DEB} {KEYRING_URL}",
            keyring_unpacked(
                KEYRING_DEB,
                f"{DOWNLOADS}/cuda-keyring.d",
                NVIDIA_KEY,
                KEYRING_ARGS["keyring_path"],
                [],
            ),
            f"install -D -m 644 -o root -g root {DOWNLOADS}/cuda-keyring.d/root/usr/share/"
            "keyrings/cuda-archive-keyring.gpg /usr/share/keyrings/cuda-archive-keyring.gpg "
            f"&& rm -rf {DOWNLOADS}/cuda-keyring.d {KEYRING_DEB}",
        ],
    ),
    # -- nvcc: checked from facts, or on the host when this very run installed it ------------
    op_case(
        nvcc_reports_release,
        "from-facts",
        {NvccRelease: {"release": "13.1", "version": "13.1.80"}},
        {"nvcc": NVCC, "release": "13.1"},
        noops=[f"{NVCC} reports release 13.1 (V13.1.80)"],
    ),
    op_case(
        nvcc_reports_release,
        "on-the-host-after-the-install",
        {NvccRelease: None},
        {"nvcc": NVCC, "release": "13.1"},
        commands=[
            f"{NVCC} --version | grep -qF 'release 13.1,' || "
            f"{{ echo '{NVCC} does not report CUDA release 13.1:' >&2; "
            f"{NVCC} --version >&2; exit 1; }}"
        ],
    ),
]


@pytest.mark.parametrize(OP_CASE_FIELDS, CASES)
def test_operation_yields_exactly(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


# -- which driver packages are stale --------------------------------------------------------


def test_stale_packages_and_upstream_versions():
    assert upstream_version("590.48.01-1") == "590.48.01"
    assert upstream_version("1:595.58.03-0ubuntu1") == "595.58.03"
    partly = {**ON_590, "nvidia-persistenced": ["595.58.03-1"]}
    assert stale_driver_packages(partly, COMPUTE_OPEN, 590) == [("nvidia-persistenced",)]
    # One installed candidate satisfies its entry.
    ubuntu = [("libnvidia-compute", "libnvidia-compute-580")]
    assert stale_driver_packages({"libnvidia-compute-580": ["580.126.20-1"]}, ubuntu, 580) == []


def test_driver_branches_are_read_from_versions():
    assert driver_branch_of("590.48.01-1") == 590
    assert driver_branch_of("610.43.02-1ubuntu1") == 610
    assert driver_branch_of("1.17.8-1") is None and driver_branch_of("2025.10.12-1") is None
    installed = {
        "nvidia-open": ["595.58.03-1"],
        "libnvidia-compute-580": ["580.126.20-1"],
        "nvidia-driver-pinning-595": ["595.58.03-1"],  # swapped by its own operation
        "nvlsm": ["2025.10.12-1"],
        "nvidia-container-toolkit": ["1.17.8-1"],
        "nvidia-persistenced": ["590.48.01-1"],
    }
    assert packages_off_branch(installed, 590) == ["libnvidia-compute-580", "nvidia-open"]


# -- the reboot decision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loaded", "installed", "changing", "container", "allow", "action"),
    [
        ("590.48.01", "590.48.01", False, None, False, "none"),
        ("580.159.04", "590.48.01", False, None, False, "required"),
        ("580.159.04", "590.48.01", False, None, True, "reboot"),
        (None, "590.48.01", False, None, True, "reboot"),
        ("590.48.01", "590.48.01", True, None, False, "required"),
        ("590.48.01", "590.48.01", True, None, True, "reboot"),
        (None, None, False, None, True, "none"),
        ("580.159.04", "590.48.01", True, "systemd-nspawn", True, "none"),
    ],
)
def test_reboot_decision(loaded, installed, changing, container, allow, action):
    decision = decide_driver_reboot(loaded, installed, changing, container, allow)
    assert decision.action == action
    if action != "none":
        assert (loaded or "no NVIDIA module") in decision.reason


# -- CUDA -------------------------------------------------------------------------------------


def test_cuda_paths_come_from_the_version():
    paths = cuda_paths("13.1")
    assert paths["package"] == "cuda-toolkit-13-1"
    assert paths["nvcc"] == "/usr/local/cuda-13.1/bin/nvcc"


def test_nvcc_reporting_another_release_fails_before_changes():
    with pytest.raises(OperationError, match="reports CUDA release 13.0 .* expected 13.1"):
        run_operation(
            nvcc_reports_release,
            {NvccRelease: {"release": "13.0", "version": "13.0.88"}},
            nvcc=NVCC,
            release="13.1",
        )


@pytest.mark.parametrize(
    ("family", "install", "modules", "branch", "packages", "module_packages"),
    [
        (
            "debian",
            "compute",
            "open",
            590,
            ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"],
            ("nvidia-kernel-open-dkms",),
        ),
        (
            "debian",
            "compute",
            "proprietary",
            590,
            ["nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced"],
            ("nvidia-kernel-dkms",),
        ),
        (
            "debian",
            "full",
            "open",
            595,
            ["nvidia-open", "nvidia-persistenced"],
            ("nvidia-kernel-open-dkms",),
        ),
        (
            "ubuntu",
            "compute",
            "open",
            580,
            [
                "libnvidia-compute|libnvidia-compute-580",
                "nvidia-dkms-open|nvidia-dkms-580-open",
                "nvidia-utils|nvidia-utils-580",
                "nvidia-persistenced",
            ],
            ("nvidia-dkms-open", "nvidia-dkms-580-open"),
        ),
        (
            "ubuntu",
            "full",
            "proprietary",
            590,
            ["cuda-drivers|cuda-drivers-590", "nvidia-persistenced"],
            ("nvidia-dkms", "nvidia-dkms-590"),
        ),
    ],
)
def test_driver_packages_per_family_install_kind_and_flavor(
    family, install, modules, branch, packages, module_packages
):
    config = HostConfig.model_construct(
        nvidia_driver_install=install, nvidia_kernel_modules=modules, nvidia_driver_branch=branch
    )
    assert ["|".join(entry) for entry in driver_packages(family, config)] == packages
    assert kernel_module_packages(family, config) == module_packages
    # The audit, which does not know the family, looks for any of them.
    assert set(module_packages) <= set(all_kernel_module_packages(config))


def test_every_driver_package_name_has_its_source_in_the_data():
    driver = data.nvidia().driver
    names = {driver.pinning_package, driver.version_pinning_package}
    for family in driver.packages.values():
        for install in (family.compute, family.full):
            for entries in (install.open, install.proprietary):
                names |= {n for e in entries for n in ([e] if isinstance(e, str) else e)}
    for family in driver.kernel_module_packages.values():
        names |= {n for flavor in (family.open, family.proprietary) for n in flavor}
    assert names - set(driver.sources) == set()
    assert set(driver.sources) - names == set()  # no source for a name no longer used


def test_the_resolution_picks_the_first_candidate_on_the_branch(tmp_path):
    # The shell the role runs, against an apt-cache that answers as apt does:
    # "Candidate: (none)" for a name without a version, nothing for an unknown name.
    import subprocess

    from roles.nvidia_driver import resolve_on_host

    fake = tmp_path / "apt-cache"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$2" in\n'
        "  libnvidia-compute) printf '%s\\n' 'libnvidia-compute:' "
        "'  Installed: (none)' '  Candidate: 610.43.02-1ubuntu1' ;;\n"
        "  libnvidia-compute-580) printf '%s\\n' 'libnvidia-compute-580:' "
        "'  Installed: (none)' '  Candidate: 580.126.20-1' ;;\n"
        "  nvidia-utils) printf '%s\\n' 'nvidia-utils:' '  Candidate: (none)' ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}

    def run(entry, branch):
        script = resolve_on_host(entry, branch, "pkg") + '; echo "picked $pkg"'
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)

    # 580: the unsuffixed name exists, but only on 610; the suffixed one is on 580.
    picked = run(("libnvidia-compute", "libnvidia-compute-580"), 580)
    assert (picked.returncode, picked.stdout) == (0, "picked libnvidia-compute-580\n")
    assert run(("libnvidia-compute",), 610).stdout == "picked libnvidia-compute\n"
    none = run(("nvidia-utils", "nvidia-utils-580"), 580)
    assert none.returncode == 100 and none.stdout == ""
    assert none.stderr.startswith("nvidia-utils or nvidia-utils-580: apt has no version on")


def test_a_host_that_does_not_come_back_names_the_setting(monkeypatch):
    # Before: TimeoutError, which pyinfra reports as "Command timed out after Nones".
    from roles import reboot, waiting

    monkeypatch.setattr(waiting.time, "sleep", lambda seconds: None)

    class Gone:
        name = "gpu-1"
        connected = False

        def disconnect(self):
            pass

        def connect(self, show_errors=True):
            pass

    with pytest.raises(OperationError, match=r"within 0 s \(reboot_timeout_s\)"):
        reboot._wait_for_reboot(None, Gone(), timeout=0.001, interval=0)


def test_reboot_timeout_is_a_bounded_whole_number():
    assert HostConfig().reboot_timeout_s == 1800
    for bad in (True, 30, 100000):
        with pytest.raises(ValueError, match="reboot_timeout_s"):
            HostConfig(reboot_timeout_s=bad)


# -- the apt plan without a host (pyinfra-sglang packages) ------------------------------------


def test_the_packages_command_prints_debians_names_and_their_sources(capsys):
    from pyinfra_sglang.cli.main import main

    assert main(["packages", "--platform", "debian12", "--modules", "proprietary"]) == 0
    out = capsys.readouterr().out
    assert "1. pin:       nvidia-driver-pinning-590" in out
    for line in ("     nvidia-driver-cuda\n", "     nvidia-kernel-dkms\n"):
        assert line in out
    plan = out.split("# where the names come from")[0]
    assert "libnvidia-compute" not in plan and "nvidia-utils" not in plan
    assert "linux-headers-<flavor>" in out and "dkms, dh-dkms" in out
    assert "\nnvidia-kernel-dkms: NVIDIA's Debian repository" in out


def test_the_packages_command_shows_what_ubuntu_resolves_on_the_host(capsys):
    from pyinfra_sglang.cli.main import main

    assert main(["packages", "--platform", "ubuntu2204", "--branch", "580"]) == 0
    out = capsys.readouterr().out
    assert (
        "the first of nvidia-dkms-open, nvidia-dkms-580-open with a version on branch 580 "
        "(resolved on the host)"
    ) in out
    assert "nvidia-dkms-open or nvidia-dkms-580-open is the driver the kernel must load" in out


# -- the keyring check, run by sh against stand-in keyrings ------------------------------------


@pytest.fixture(scope="module")
def keyring_deb(tmp_path_factory):
    """A cuda-keyring .deb of the stand-in repository, and the fingerprint of its key."""
    import shutil
    import subprocess

    if not all(shutil.which(tool) for tool in ("dpkg-deb", "gpg")):
        pytest.skip("needs dpkg-deb and gpg")
    from tests.hosts import aptrepo

    built = aptrepo.build_repo(
        tmp_path_factory.mktemp("keyring-repo"), targets=[("debian12", "x86_64")]
    )
    listing = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(built.public_key)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fingerprint = next(
        line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr")
    )
    return built.repo("debian12", "x86_64") / "cuda-keyring_1.1-1_all.deb", fingerprint


def run_check(deb, tmp_path, sha256):
    import shutil
    import subprocess

    copy = tmp_path / "cuda-keyring.deb"
    shutil.copy(deb, copy)
    script = keyring_check(str(copy), sha256, NVIDIA_KEY, KEYRING_ARGS["keyring_path"])
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    return done, copy.exists()


def test_a_keyring_of_another_sha256_is_refused_and_removed(keyring_deb, tmp_path):
    import hashlib

    deb, _ = keyring_deb
    refused, kept = run_check(deb, tmp_path, sha256="0" * 64)
    assert refused.returncode == 1 and not kept
    actual = hashlib.sha256(deb.read_bytes()).hexdigest()
    assert f"sha256 is {actual}, expected {'0' * 64}" in refused.stderr
    accepted, kept = run_check(deb, tmp_path, sha256=actual)
    assert accepted.returncode == 0 and kept


def test_a_plain_http_mirror_needs_a_pinned_keyring():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="nvidia_keyring_sha256"):
        HostConfig(nvidia_apt_mirror="http://mirror.internal/cuda")
    assert (
        HostConfig(nvidia_apt_mirror="https://mirror.internal/cuda").nvidia_keyring_sha256 is None
    )
    pinned = HostConfig(
        nvidia_apt_mirror="http://mirror.internal/cuda", nvidia_keyring_sha256="a" * 64
    )
    assert pinned.nvidia_keyring_sha256 == "a" * 64
    with pytest.raises(ValidationError):
        HostConfig(nvidia_keyring_sha256="A" * 64)  # lowercase hex, as sha256sum prints


# -- other entries for NVIDIA's repository ------------------------------------------------------

REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
PLAIN_REPO = REPO.replace("https://", "http://")  # one repository to apt's Signed-By check
OWN_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


def source_lines(files: dict[str, str]) -> list[str]:
    """What the fact's command prints for these files: <file>\\t<line>\\t<text>."""
    return [
        f"{path}\t{number}\t{text}"
        for path, content in files.items()
        for number, text in enumerate(content.splitlines(), start=1)
    ]


def test_entries_for_nvidias_repository_are_found_in_both_formats():
    from pyinfra_sglang.parsers.system import parse_repository_entries

    entries = parse_repository_entries(
        source_lines(
            {
                "/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n",
                "/etc/apt/sources.list.d/dgx.list": (
                    f"# NVIDIA\ndeb [signed-by=/usr/share/keyrings/other.gpg] {PLAIN_REPO} /\n"
                ),
                "/etc/apt/sources.list.d/cuda.sources": (
                    "Types: deb\nURIs: https://example.org/debian\nSuites: stable\n\n"
                    f"Types: deb\nURIs: {REPO.rstrip('/')}\nSuites: /\nSigned-By: /k.gpg\n\n"
                    f"Types: deb\nURIs: {REPO}\nSuites: /\nEnabled: no\n"
                ),
            }
        )
    )
    assert [(e["file"], e["first_line"], e["last_line"], e["format"]) for e in entries] == [
        ("/etc/apt/sources.list", 1, 1, "one-line"),
        ("/etc/apt/sources.list.d/dgx.list", 2, 2, "one-line"),
        ("/etc/apt/sources.list.d/cuda.sources", 1, 3, "deb822"),
        ("/etc/apt/sources.list.d/cuda.sources", 5, 8, "deb822"),  # the disabled one is not
    ]


def test_other_entries_are_commented_out_and_ours_is_kept():
    from checks.facts import RepositoryEntries
    from roles.nvidia_repo import other_entries_disabled

    def entry(file, first, last, uri, fmt="one-line"):
        return {"file": file, "first_line": first, "last_line": last, "format": fmt, "uris": [uri]}

    found = [
        entry(OWN_LIST, 2, 2, REPO),
        entry("/etc/apt/sources.list.d/dgx.list", 2, 2, REPO.replace("https", "http")),
        entry("/etc/apt/sources.list.d/cuda.sources", 5, 8, REPO.rstrip("/"), "deb822"),
        entry("/etc/apt/sources.list", 1, 1, "http://deb.debian.org/debian"),
    ]
    mark = f"# disabled by pyinfra-sglang, {OWN_LIST} has this repository: "
    assert run_operation(
        other_entries_disabled, {RepositoryEntries: found}, urls=[REPO], own_file=OWN_LIST
    ) == (
        [
            f"sed -i '2,2s|^|{mark}|' /etc/apt/sources.list.d/dgx.list",
            f"sed -i '5,8s|^|{mark}|' /etc/apt/sources.list.d/cuda.sources",
        ],
        [],
    )
    assert run_operation(
        other_entries_disabled, {RepositoryEntries: found[:1]}, urls=[REPO], own_file=OWN_LIST
    ) == ([], [f"no other apt source entry for {REPO}"])


# -- within-branch updates ----------------------------------------------------------------------


def test_a_newer_release_of_the_branch_is_installed_only_when_asked():
    from checks.facts import AptPolicy

    old = {p: ["590.44.01-1"] for p in NAMES}
    policy = {p: {"installed": "590.44.01-1", "candidate": "590.48.01-1"} for p in NAMES}
    facts = {DebPackages: old, AptPolicy: policy}
    args = {"entries": COMPUTE_OPEN, "branch": 590}
    assert run_operation(driver_packages_on_branch, facts, **args) == (
        [],
        ["nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-persistenced on branch 590"],
    )
    asked = run_operation(driver_packages_on_branch, facts, **args, update_within_branch=True)
    assert asked == ([INSTALL_COMPUTE_OPEN], [])
    # The newest already, or a newer release only on another branch: nothing to do.
    newest = {p: {"installed": "590.44.01-1", "candidate": "590.44.01-1"} for p in NAMES}
    other = {p: {"installed": "590.44.01-1", "candidate": "595.58.03-1"} for p in NAMES}
    for candidates in (newest, other):
        assert run_operation(
            driver_packages_on_branch,
            {DebPackages: old, AptPolicy: candidates},
            **args,
            update_within_branch=True,
        ) == (
            [],
            [
                "nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-persistenced on branch 590 "
                "(the newest apt offers)"
            ],
        )


def test_apt_policy_output_is_read_per_package():
    from pyinfra_sglang.parsers.system import parse_apt_policy

    policy = parse_apt_policy(
        [
            "nvidia-driver-cuda:",
            "  Installed: 590.44.01-1",
            "  Candidate: 590.48.01-1",
            "  Version table:",
            "     590.48.01-1 1000",
            "        500 http://127.0.0.1:1/debian12/x86_64  Packages",
            " *** 590.44.01-1 1000",
            "nvidia-kernel-dkms:",
            "  Installed: (none)",
            "  Candidate: (none)",
        ]
    )
    assert policy == {
        "nvidia-driver-cuda": {"installed": "590.44.01-1", "candidate": "590.48.01-1"},
        "nvidia-kernel-dkms": {"installed": None, "candidate": None},
    }


# -- a module flavor the GPUs cannot run ---------------------------------------------------------


def test_proprietary_modules_for_a_blackwell_only_profile_are_refused_by_validate(tmp_path):
    from pyinfra_sglang.inventory import InventoryError, load_inventory_file, validate_inventory

    def problems(profile: str, modules: str):
        path = tmp_path / f"{profile}-{modules}.py"
        path.write_text(
            "gpus = [('gpu-1', {'ssh_strict_host_key_checking': 'yes', "
            f"'sglang_model_profile': {profile!r}, 'nvidia_kernel_modules': {modules!r}}})]\n"
        )
        try:
            validate_inventory(load_inventory_file(str(path)))
        except InventoryError as error:
            return [(p.field, p.allowed) for p in error.problems]
        return []

    # glm-5-nvfp4 runs on sm_100 and sm_120 only: Blackwell, open modules only.
    assert problems("glm-5-nvfp4", "proprietary") == [("nvidia_kernel_modules", "open")]
    assert problems("glm-5-nvfp4", "open") == []
    assert problems("dense-bf16", "proprietary") == []  # a Hopper host may take them


def found_gpus(capture: str) -> list[dict]:
    """NvidiaGpus as read from a real machine's nvidia-smi (tests/fixtures/gpu/)."""
    from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
    from tests.unit.captures import captured_lines

    query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
    return NvidiaGpus().process(captured_lines(capture, query))


class PlannedDriverCheck:  # run_operation drives a generator; this check yields nothing
    @staticmethod
    def _inner(**kwargs):
        from roles.nvidia_driver import refuse_driver_for_gpus

        refuse_driver_for_gpus(**kwargs)
        return []


def test_proprietary_modules_on_blackwell_gpus_found_are_refused_at_planning():
    from roles.nvidia_driver import DriverRefusedForGpus

    blackwell = {NvidiaGpus: found_gpus("rtxpro6000x8-pcie-from-smiq")}
    proprietary = HostConfig(nvidia_kernel_modules="proprietary")
    with pytest.raises(DriverRefusedForGpus) as refused:
        run_operation(PlannedDriverCheck, blackwell, config=proprietary)
    # Host, field, GPUs, why and what is allowed, in one line; nothing changed.
    assert str(refused.value) == (
        "host op-test-host: nvidia_kernel_modules = 'proprietary' cannot run GPUs "
        "0, 1, 2, 3, 4, 5, 6, 7 (NVIDIA RTX PRO 6000 Blackwell Server Edition): proprietary "
        "kernel modules cannot run Blackwell GPUs (sm_120): they run only on NVIDIA's open "
        "modules; allowed: open\nNothing was changed."
    )
    assert run_operation(PlannedDriverCheck, blackwell, config=HostConfig()) == ([], [])
    hopper = {NvidiaGpus: found_gpus("h200x2-nvlink-vm")}
    assert run_operation(PlannedDriverCheck, hopper, config=proprietary) == ([], [])
    assert run_operation(PlannedDriverCheck, {NvidiaGpus: []}, config=proprietary) == ([], [])
    # A GPU whose compute capability nvidia-smi could not tell does not break the check.
    unread = {
        NvidiaGpus: [{"index": "0", "compute_cap": None}, {"index": "1", "compute_cap": "12.0"}]
    }
    with pytest.raises(DriverRefusedForGpus, match=r"GPU 1 \(unnamed\): .*sm_120"):
        run_operation(PlannedDriverCheck, unread, config=proprietary)


def test_a_branch_past_a_retired_architecture_is_refused_naming_the_branches_allowed():
    from roles.nvidia_driver import DriverRefusedForGpus

    # No capture of a Volta machine here: one nvidia-smi row as --query-gpu prints it.
    volta = {NvidiaGpus: [{"index": "0", "name": "Tesla V100-SXM2-32GB", "compute_cap": "7.0"}]}
    with pytest.raises(DriverRefusedForGpus) as refused:
        run_operation(PlannedDriverCheck, volta, config=HostConfig(nvidia_driver_branch=590))
    lines = str(refused.value).splitlines()
    assert lines == [
        "host op-test-host: nvidia_driver_branch = 590 cannot run GPU 0 (Tesla V100-SXM2-32GB): "
        "driver branch 590 cannot run Volta GPUs (sm_70): they run on branches 384 to 580; "
        "allowed: 580",
        "host op-test-host: nvidia_kernel_modules = 'open' cannot run GPU 0 "
        "(Tesla V100-SXM2-32GB): open kernel modules cannot run Volta GPUs (sm_70): they run "
        "only on NVIDIA's proprietary modules; allowed: proprietary",
        "Nothing was changed.",
    ]
    fits = HostConfig(
        nvidia_driver_branch=580,
        nvidia_kernel_modules="proprietary",
        cuda_version="12.9",
        sglang_version="0.5.10",  # the newest with a CUDA 12 install on PyPI
    )
    assert run_operation(PlannedDriverCheck, volta, config=fits) == ([], [])


def test_ubuntus_deb822_sources_with_comments_inside_are_two_stanzas():
    # Captured on the H200 VM (Ubuntu 24.04): comment lines between and inside stanzas.
    from pathlib import Path

    from pyinfra_sglang.parsers.system import parse_repository_entries

    facts = Path(__file__).resolve().parents[1] / "fixtures" / "facts"
    lines = (facts / "repository_entries_h200_vm.txt").read_text().splitlines()
    entries = parse_repository_entries(lines)
    assert [(e["first_line"], e["last_line"], e["uris"]) for e in entries] == [
        (32, 36, ["http://archive.ubuntu.com/ubuntu/"]),
        (40, 44, ["http://security.ubuntu.com/ubuntu/"]),
    ]
    # Neither is NVIDIA's: nothing to disable there.
    from pyinfra_sglang.parsers.system import same_repository

    assert not any(same_repository(e["uris"][0], REPO) for e in entries)


def test_a_comment_inside_a_stanza_does_not_split_it():
    from pyinfra_sglang.parsers.system import parse_repository_entries

    [entry] = parse_repository_entries(
        source_lines(
            {
                "/etc/apt/sources.list.d/cuda.sources": (
                    f"Types: deb\n# mirror\nURIs: {REPO}\nSuites: /\n"
                )
            }
        )
    )
    assert (entry["first_line"], entry["last_line"], entry["uris"]) == (1, 4, [REPO])


def test_a_within_branch_update_counts_as_a_driver_change_for_the_reboot():
    # Before: the deploy's own copy of the change check left within-branch updates out, so a
    # driver moved to a newer release did not reboot (or mark the host) for it.
    from checks.facts import AptPolicy
    from roles.nvidia_driver import driver_change

    seen = []

    class Planned:
        @staticmethod
        def _inner(**kwargs):
            seen.append(driver_change(**kwargs))
            return []

    old = {p: ["590.44.01-1"] for p in NAMES}
    policy = {p: {"installed": "590.44.01-1", "candidate": "590.48.01-1"} for p in NAMES}
    args = {"entries": COMPUTE_OPEN, "branch": 590}
    run_operation(Planned, {DebPackages: old, AptPolicy: policy}, **args, update_within_branch=True)
    run_operation(Planned, {DebPackages: old}, **args, update_within_branch=False)
    asked, not_asked = seen
    assert bool(asked) and asked.updates == NAMES and not not_asked
