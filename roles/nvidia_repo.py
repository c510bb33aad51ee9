"""NVIDIA's CUDA apt repository for the host's distro and arch, through the cuda-keyring
package; a mirror from the inventory replaces NVIDIA's URL (air-gapped sites)."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, deploy, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import files
from pyinfra.operations.util import any_changed

from checks.facts import AptSourceEntries, RepositoryEntries
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_config
from pyinfra_sglang.parsers.system import same_repository
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
def other_entries_disabled(urls: list[str], own_file: str):
    """Comment out every other apt source entry for NVIDIA's repository (or the mirror):
    cloud GPU images and DGX OS list it already, with another keyring, and apt refuses two
    entries of one URI with different Signed-By ("Conflicting values set for option
    Signed-By"). One-line entries lose their line, deb822 ones their whole stanza."""
    found = [
        entry
        for entry in host.get_fact(RepositoryEntries)
        if entry["file"] != own_file
        and any(same_repository(uri, url) for uri in entry["uris"] for url in urls)
    ]
    if not found:
        host.noop(f"no other apt source entry for {', '.join(urls)}")
        return
    for entry in found:
        lines = f"{int(entry['first_line'])},{int(entry['last_line'])}"
        mark = f"# disabled by pyinfra-sglang, {own_file} has this repository: "
        yield StringCommand(
            "sed", "-i", QuoteString(f"{lines}s|^|{mark}|"), QuoteString(entry["file"])
        )


def keyring_check(deb: str, sha256: str | None, fingerprint: str, keyring_path: str) -> str:
    """Shell that fails, naming what it found, unless the .deb at ``deb`` is the expected
    one: its sha256 when pinned, else the fingerprint of the key it installs."""
    quoted = shlex.quote(deb)
    if sha256:
        return (
            f"actual=$(sha256sum {quoted} | cut -d' ' -f1); "
            f'[ "$actual" = {shlex.quote(sha256)} ] || {{ echo "the downloaded keyring\'s '
            f'sha256 is $actual, expected {sha256}: not installing it" >&2; '
            f"rm -f {quoted}; exit 1; }}"
        )
    # The key it would install, read without installing it (no maintainer script runs).
    inside = shlex.quote(keyring_path.lstrip("/"))
    return (
        f"check=$(mktemp -d -p {shlex.quote(str(PurePosixPath(deb).parent))}) && "
        f'dpkg-deb -x {quoted} "$check/root" && mkdir -m 700 "$check/gnupg" && '
        f'actual=$(GNUPGHOME="$check/gnupg" gpg --batch --show-keys --with-colons '
        f"\"$check/root\"/{inside} 2>/dev/null | awk -F: '/^fpr/ {{print $10; exit}}'); "
        f'rm -rf "$check"; [ "$actual" = {shlex.quote(fingerprint)} ] || {{ '
        f"echo \"the downloaded keyring carries key ${{actual:-none}}, not NVIDIA's "
        f"{fingerprint}: not installing it (pin nvidia_keyring_sha256 for a mirror that signs "
        f'with its own key)" >&2; rm -f {quoted}; exit 1; }}'
    )


@operation()
def keyring_installed(
    package: str,
    src: str,
    fingerprint: str,
    keyring_path: str,
    download_dir: str,
    sha256: str | None = None,
):
    """Install ``package`` from the .deb at ``src`` unless dpkg has it (asked first): downloaded
    into the root-only ``download_dir`` and checked (keyring_check) before apt-get installs
    it, so it waits for dpkg's locks and pulls the package's dependencies."""
    if package in host.get_fact(DebPackages):
        host.noop(f"{package} is installed")
        return
    folder = QuoteString(download_dir)
    # apt-get takes a local file for a package only by a path ending in .deb.
    deb = f"{download_dir}/{package}.deb"
    # An https URL may not be redirected to plain http.
    protocols = "=https" if src.startswith("https://") else "=http,https"
    yield StringCommand("install", "-d", "-m", "700", "-o", "root", "-g", "root", folder)
    yield StringCommand(
        "curl", "-fsSL", "--proto", protocols, "-o", QuoteString(deb), QuoteString(src)
    )
    yield keyring_check(deb, sha256, fingerprint, keyring_path)
    yield apt_get("install", QuoteString(deb))
    yield StringCommand("rm", "-f", QuoteString(deb))


def keyring_sha256(config: HostConfig, platform: Platform) -> str | None:
    """The keyring's sha256 to check: the inventory's, else the one pinned in data for the
    platform's repository folder, else None (checked by the key's fingerprint)."""
    pinned = data.load("nvidia")["repo"].get("keyring_sha256", {})
    return config.nvidia_keyring_sha256 or pinned.get(
        f"{platform.nvidia_repo}/{platform.nvidia_arch}"
    )


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

    list_path = repo["list_path"].format(distro=platform.nvidia_repo, arch=platform.nvidia_arch)
    nvidia_url = f"{repo['base_url']}/{platform.nvidia_repo}/{platform.nvidia_arch}/"
    others = other_entries_disabled(
        name="Disable other apt entries for NVIDIA's repository",
        urls=sorted({url, nvidia_url}),
        own_file=list_path,
    )
    keyring = keyring_installed(
        name="Install NVIDIA's repository signing key (cuda-keyring)",
        package=repo["keyring_package"],
        src=url + repo["keyring_deb"],
        sha256=keyring_sha256(config, platform),
        fingerprint=repo["signing_key_fingerprint"],
        keyring_path=repo["keyring_path"],
        download_dir=repo["download_dir"],
    )
    source = files.template(
        name="Point apt at NVIDIA's repository",
        src=template("cuda-repo.list.j2"),
        dest=list_path,
        keyring_path=repo["keyring_path"],
        repo_url=url,
        user="root",
        group="root",
        mode="644",
    )
    changed = [op for op in (components, others, keyring, source) if op is not None]
    apt_lists_updated(name="Refresh apt after a repository change", _if=any_changed(*changed))
