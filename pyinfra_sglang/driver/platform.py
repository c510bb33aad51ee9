"""Which distros and architectures pyinfra-sglang supports, from data/platforms.toml."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data


class UnsupportedPlatformError(PyinfraError):
    """The host runs a distro or architecture this project does not provision."""


@dataclass(frozen=True)
class Platform:
    distro_id: str  # os-release ID, e.g. "debian"
    version: str  # os-release VERSION_ID, e.g. "12"
    machine: str  # uname -m, e.g. "x86_64"
    nvidia_repo: str  # NVIDIA's repository distro folder, e.g. "debian12"
    nvidia_arch: str  # NVIDIA's repository arch folder, e.g. "x86_64" or "sbsa"
    components: tuple[str, ...]  # extra distro apt components, e.g. ("contrib",)
    driver_family: str  # which names NVIDIA's repository gives the driver there: "debian", "ubuntu"


def supported_platforms() -> list[str]:
    platforms = data.platforms()
    distros = ", ".join(f"{p.id} {p.version}" for p in platforms.platform)
    return [distros, ", ".join(platforms.arch)]


def resolve_platform(host_name: str, os_release: dict, machine: str) -> Platform:
    """Map a host's os-release and ``uname -m`` to a supported Platform, or refuse clearly."""
    platforms = data.platforms()
    distro_id = str(os_release.get("ID", "")).lower()
    version = str(os_release.get("VERSION_ID", ""))
    distros, arches = supported_platforms()
    match = next(
        (p for p in platforms.platform if p.id == distro_id and p.version == version),
        None,
    )
    pretty = os_release.get("PRETTY_NAME") or f"{distro_id or 'unknown'} {version}".strip()
    if match is None:
        raise UnsupportedPlatformError(
            f"host {host_name}: unsupported distro {pretty!s} "
            f"(os-release ID={distro_id or '?'} VERSION_ID={version or '?'}); "
            f"supported: {distros}. Nothing was changed."
        )
    if machine not in platforms.arch:
        raise UnsupportedPlatformError(
            f"host {host_name}: unsupported architecture {machine!r} on {pretty}; "
            f"supported: {arches}. Nothing was changed."
        )
    return Platform(
        distro_id=distro_id,
        version=version,
        machine=machine,
        nvidia_repo=match.nvidia_repo,
        nvidia_arch=platforms.arch[machine],
        components=match.components,
        driver_family=match.driver_family,
    )
