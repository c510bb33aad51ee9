"""The NVIDIA driver a host already holds, before the deploy touches it: where it came from
(NVIDIA's repository, the distribution's archive, NVIDIA's runfile, the outer host of a
container or VM), what would fight NVIDIA's packages in managed mode, and, with
``nvidia_driver_source = "host"``, why the running driver cannot serve the inventory.

Pure functions over facts (checks/facts/nvidia.py ``HostDriverState``, ``DebPackages``,
``DkmsState``); the rules are data (data/host_driver.toml; docs/hosts.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from pyinfra_sglang import data
from pyinfra_sglang.driver.nvidia import (
    compute_cap_arch,
    cuda_paths,
    driver_branch_of,
    driver_mismatches,
    minor_version_compat_floor,
    pinning_prefix,
    toolkit_driver_minimums,
    upstream_version,
    version_key,
)

HOST = 'nvidia_driver_source = "host"'
MANAGED = 'nvidia_driver_source = "managed"'


class HostDriverStateDict(TypedDict):
    runfile: list[str]  # runfile installer markers found (data/host_driver.toml)
    toolkits: dict[str, str]  # CUDA release -> its nvcc, for each toolkit found


_NVCC_LINE = re.compile(r"^nvcc (?P<path>\S+) .*release (?P<release>\d+\.\d+),")


def parse_host_driver_state(output: Iterable[str]) -> HostDriverStateDict:
    """``runfile <path>`` lines, and ``nvcc <path> <nvcc --version's release line>`` lines
    (an nvcc that prints no release is no toolkit)."""
    state: HostDriverStateDict = {"runfile": [], "toolkits": {}}
    for raw in output:
        line = raw.strip()
        if line.startswith("runfile "):
            state["runfile"].append(line.removeprefix("runfile ").strip())
            continue
        match = _NVCC_LINE.match(line)
        if match:
            # The release's own folder wins over another name for it (/usr/local/cuda-13).
            release, path = match["release"], match["path"]
            if release not in state["toolkits"] or path == cuda_paths(release)["nvcc"]:
                state["toolkits"][release] = path
    return state


def host_driver_state_command() -> str:
    rules = data.host_driver()
    markers = " ".join(rules.origin.runfile_markers)
    return (
        f'for f in {markers}; do [ -e "$f" ] && echo "runfile $f"; done; '
        f"for n in {rules.toolkits.nvcc_glob}; do "
        '[ -x "$n" ] && echo "nvcc $n $("$n" --version 2>/dev/null | grep release)"; '
        "done; true"
    )


# --- what another installer left: refused in managed mode -------------------------------


@dataclass(frozen=True)
class ForeignPackage:
    name: str
    version: str
    why: str


def _driver_package(name: str) -> bool:
    prefixes = (
        data.nvidia().driver.branch_move_prefixes + data.host_driver().origin.archive_prefixes
    )
    return name.startswith(prefixes) and not name.startswith(pinning_prefix())


def archive_package_reason(name: str, version: str) -> str | None:
    """Why ``name`` at ``version`` is the distribution's build, not NVIDIA's; None if not."""
    origin = data.host_driver().origin
    if name.startswith(origin.archive_prefixes) or any(
        re.search(pattern, name) for pattern in origin.archive_name_patterns
    ):
        return "a name only Ubuntu's archive ships"
    revision = version.split(":", 1)[-1]
    if any(re.search(pattern, revision) for pattern in origin.archive_revision_patterns):
        return "a distribution archive's build (its Debian revision)"
    return None


def archive_driver_packages(installed: dict[str, list[str]]) -> list[ForeignPackage]:
    """Installed NVIDIA driver packages that came from the distribution's archive."""
    found = []
    for name in sorted(installed):
        if not _driver_package(name):
            continue
        for version in installed[name]:
            why = archive_package_reason(name, version)
            if why:
                found.append(ForeignPackage(name, version, why))
                break
    return found


def orphan_dkms_modules(dkms: dict | None, installed: dict[str, list[str]]) -> list[str]:
    """NVIDIA modules DKMS holds that no installed driver package carries (a runfile's, or
    a removed package's): ``nvidia/<version>``."""
    carried = {
        upstream_version(version)
        for name, versions in installed.items()
        if _driver_package(name)
        for version in versions
    }
    built = {v for versions in (dkms or {}).get("built", {}).values() for v in versions}
    return [f"nvidia/{version}" for version in sorted(built - carried)]


@dataclass(frozen=True)
class ForeignDriver:
    """NVIDIA software on the host that NVIDIA's packages would fight."""

    packages: tuple[ForeignPackage, ...] = ()
    dkms: tuple[str, ...] = ()
    runfile: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.packages or self.dkms or self.runfile)

    def removable(self) -> bool:
        """Can the driver's apt transaction take it all away? A runfile's install is
        undone only by its own uninstaller."""
        return not self.runfile

    def found(self) -> list[str]:
        lines = [f"package {p.name} {p.version} ({p.why})" for p in self.packages]
        lines += [f"DKMS module {module} that no installed package carries" for module in self.dkms]
        lines += [f"{marker} (NVIDIA's runfile installer)" for marker in self.runfile]
        return lines

    def ways_out(self) -> list[str]:
        ways = [f"use the driver as it is: {HOST}"]
        if self.runfile:
            ways.append(
                "switch to NVIDIA's packages: run nvidia-uninstall on the host (the runfile's "
                "own uninstaller), reboot, then deploy again"
            )
        else:
            ways.append(
                "switch to NVIDIA's packages: nvidia_driver_remove_foreign = true (the "
                "driver role purges them before installing NVIDIA's; a reboot follows)"
            )
        return ways


def foreign_driver(
    installed: dict[str, list[str]], dkms: dict | None, runfile: list[str]
) -> ForeignDriver:
    return ForeignDriver(
        packages=tuple(archive_driver_packages(installed)),
        dkms=tuple(orphan_dkms_modules(dkms, installed)),
        runfile=tuple(runfile),
    )


# --- the driver that runs, in host mode -------------------------------------------------


@dataclass(frozen=True)
class RunningDriver:
    version: str | None  # None: no driver runs
    flavor: str | None  # "open" or "proprietary"; None where only nvidia-smi told
    origin: str  # where it came from, in words

    @property
    def branch(self) -> int | None:
        return driver_branch_of(self.version) if self.version else None


def running_driver(
    loaded: dict | None,
    gpus: list[dict],
    smi_package: str | None,
    installed: dict[str, list[str]],
    runfile: list[str],
    virtualization: dict,
) -> RunningDriver:
    version = loaded["version"] if loaded else None
    flavor = loaded["flavor"] if loaded else None
    if version is None and gpus:
        version = gpus[0].get("driver_version")
    return RunningDriver(
        version, flavor, driver_origin(smi_package, installed, runfile, virtualization)
    )


def driver_origin(
    smi_package: str | None,
    installed: dict[str, list[str]],
    runfile: list[str],
    virtualization: dict,
) -> str:
    if smi_package:
        versions = installed.get(smi_package, [])
        version = max(versions) if versions else ""
        if archive_package_reason(smi_package, version):
            return f"the distribution's archive ({smi_package} {version})"
        return f"NVIDIA's packages ({smi_package} {version})".replace(" )", ")")
    if runfile:
        return f"NVIDIA's runfile installer ({', '.join(runfile)})"
    container = virtualization.get("container")
    if container and container not in ("none", "unknown"):
        return f"the outer host of this container ({container})"
    vm = virtualization.get("vm")
    if vm and vm not in ("none", "unknown"):
        return f"outside the package manager (no package owns nvidia-smi; a {vm} VM)"
    return "outside the package manager (no package owns nvidia-smi)"


@dataclass(frozen=True)
class HostDriverProblem:
    field: str
    message: str


def host_driver_problems(
    running: RunningDriver,
    gpus: list[dict],
    cuda_version: str,
    flash_attn_build: bool,
    toolkits: dict[str, str],
) -> list[HostDriverProblem]:
    """What the host's own driver and toolkits cannot serve (host mode): no driver, a
    driver the GPUs' architecture or the CUDA builds cannot run on, no toolkit where
    flash-attn is built."""
    if running.version is None or running.branch is None:
        return [
            HostDriverProblem(
                "nvidia_driver_source",
                f"{HOST} needs a running NVIDIA driver; this host has none (no "
                "/proc/driver/nvidia/version, nvidia-smi finds no GPU). Install one, or let "
                f"the deploy do it: {MANAGED}",
            )
        ]
    problems = _architecture_problems(running, gpus)
    floor = minor_version_compat_floor(cuda_version)
    if floor is not None and running.branch < floor:
        runs = [
            release
            for release in data.nvidia().cuda_versions
            if (minor_version_compat_floor(release) or 0) <= running.branch
        ]
        problems.append(
            HostDriverProblem(
                "cuda_version",
                f"torch and SGLang for CUDA {cuda_version} need driver branch {floor} or "
                f"later (CUDA minor-version compatibility: CUDA {cuda_version.split('.')[0]}.x "
                f"runs on >= {floor}); the host runs {running.version} ({running.origin}). "
                f"allowed: {', '.join(runs) or 'none of ' + ', '.join(data.nvidia().cuda_versions)}"
                f", or {MANAGED}",
            )
        )
    if flash_attn_build and toolkits.get(cuda_version) != cuda_paths(cuda_version)["nvcc"]:
        found = ", ".join(f"{release} ({nvcc})" for release, nvcc in sorted(toolkits.items()))
        problems.append(
            HostDriverProblem(
                "flash_attn_build",
                f"flash-attn is built with {cuda_paths(cuda_version)['nvcc']}, and this host has "
                f"{'the toolkits ' + found if found else 'no CUDA toolkit'} "
                f"({HOST} installs none). allowed: cuda_version = one found, "
                "flash_attn_build = false, or a toolkit installed by the host's owner",
            )
        )
    return problems


def _architecture_problems(running: RunningDriver, gpus: list[dict]) -> list[HostDriverProblem]:
    by_message: dict[str, list[str]] = {}
    for gpu in gpus:
        arch = compute_cap_arch(gpu.get("compute_cap"))
        if not arch:
            continue
        flavors = [running.flavor] if running.flavor else ["open", "proprietary"]
        mismatches = [driver_mismatches(arch, running.branch, flavor) for flavor in flavors]
        # Unknown flavor (a container): judged on the branch alone, as any flavor may run.
        common = set.intersection(*(set(m) for m in mismatches))
        for mismatch in sorted(common, key=lambda m: m.field):
            what = "branch" if mismatch.field == "nvidia_driver_branch" else "kernel modules"
            key = f"{what}: {mismatch.message}; allowed: {mismatch.allowed}"
            by_message.setdefault(key, []).append(str(gpu.get("index", "?")))
    return [
        HostDriverProblem(
            "nvidia_driver_source",
            f"the host's driver {running.version} ({running.flavor or 'flavor unknown'}, from "
            f"{running.origin}) cannot run GPU{'s' if len(indexes) > 1 else ''} "
            f"{', '.join(indexes)}: {key}, or {MANAGED}",
        )
        for key, indexes in by_message.items()
    ]


def minor_version_note(cuda_version: str, driver: str) -> str | None:
    """Where ``driver`` is older than the release's own minimum but on its major's floor:
    it runs the CUDA builds only through minor-version compatibility (no JIT of newer PTX,
    which Triton and FlashInfer kernels use). None when it runs them fully (or not at all)."""
    rows = toolkit_driver_minimums(cuda_version)
    floor = minor_version_compat_floor(cuda_version)
    if not rows or floor is None or version_key(driver) >= version_key(rows[-1].driver):
        return None
    if version_key(driver)[0] < floor:
        return None
    return (
        f"driver {driver} is older than CUDA {cuda_version} needs ({rows[-1].text()}): it "
        f"runs CUDA {cuda_version} programs through minor-version compatibility (CUDA "
        f"{cuda_version.split('.')[0]}.x on >= {floor}), without JIT compilation of newer "
        "PTX, which Triton and FlashInfer kernels use"
    )
