"""NVIDIA's CUDA apt repository for the host's distro and arch, through the cuda-keyring
package; a mirror from the inventory replaces NVIDIA's URL (air-gapped sites)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, deploy, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import files
from pyinfra.operations.util import any_changed

from checks.facts import AptSourceEntries
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config
from pyinfra_sglang.paths import template
from pyinfra_sglang.platform import Platform
from roles.common import apt_get, apt_lists_updated, host_platform


def nvidia_repo_url(config: HostConfig, platform: Platform) -> str:
    """The flat repository folder for this host: <base>/<distro>/<arch>/."""
    base = str(config.nvidia_apt_mirror or data.load("nvidia")["repo"]["base_url"]).rstrip("/")
    return f"{base}/{platform.nvidia_repo}/{platform.nvidia_arch}/"


@operation()
def apt_components(components: list[str]):
    """Add ``components`` to every apt source entry that carries ``main`` (Debian's
    NVIDIA packages need ``contrib``); flat repositories are left alone."""
    commands = []
    for entry in host.get_fact(AptSourceEntries):
        missing = [c for c in components if c not in entry["components"]]
        if "main" in entry["components"] and missing:
            # Append at the end of that line: one-line entries end with their components,
            # deb822 entries have them on their own Components: line.
            expression = f"{int(entry['line'])}s/[[:space:]]*$/ {' '.join(missing)}/"
            commands.append(
                StringCommand("sed", "-i", QuoteString(expression), QuoteString(entry["file"]))
            )
    if not commands:
        host.noop(f"apt sources already have {', '.join(components)}")
    yield from commands


@operation()
def deb_installed(package: str, src: str):
    """Install ``package`` from the .deb at the URL ``src`` unless dpkg has it (asked first:
    pyinfra's apt.deb downloads the file before it can compare). apt-get installs the file,
    so it waits for dpkg's locks and pulls the package's dependencies."""
    if package in host.get_fact(DebPackages):
        host.noop(f"{package} is installed")
        return
    # apt-get takes a local file for a package only by a path ending in .deb.
    deb = f"{host.get_temp_filename(src)}.deb"
    yield from files.download._inner(src=src, dest=deb)
    yield apt_get("install", QuoteString(deb))
    yield StringCommand("rm", "-f", QuoteString(deb))


@deploy("NVIDIA repository")
def nvidia_repo() -> None:
    config = host_config(host)
    platform = host_platform()
    repo = data.load("nvidia")["repo"]
    url = nvidia_repo_url(config, platform)

    components = None
    if platform.components:
        components = apt_components(
            name="Enable the distro components NVIDIA's packages need",
            components=list(platform.components),
        )

    keyring = deb_installed(
        name="Install NVIDIA's repository signing key (cuda-keyring)",
        package=repo["keyring_package"],
        src=url + repo["keyring_deb"],
    )
    source = files.template(
        name="Point apt at NVIDIA's repository",
        src=template("cuda-repo.list.j2"),
        dest=repo["list_path"].format(distro=platform.nvidia_repo, arch=platform.nvidia_arch),
        keyring_path=repo["keyring_path"],
        repo_url=url,
        user="root",
        group="root",
        mode="644",
    )
    changed = [op for op in (components, keyring, source) if op is not None]
    apt_lists_updated(name="Refresh apt after a repository change", _if=any_changed(*changed))
