"""NVIDIA's CUDA apt repository for the host's distro and arch, through the cuda-keyring
package; a mirror from the inventory replaces NVIDIA's URL (air-gapped sites)."""

from __future__ import annotations

import hashlib
import shlex
import urllib.parse

from pyinfra import host
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, deploy, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, Sha256File
from pyinfra.facts.server import Command, LinuxDistribution
from pyinfra.operations.util import any_changed

from checks.facts import (
    AptSourceEntries,
    FileStates,
    RepositoryEntries,
    read_once,
    read_together,
)
from pyinfra_sglang import data
from pyinfra_sglang.driver.mirror_login import login_problem, split_login
from pyinfra_sglang.driver.platform import Platform
from pyinfra_sglang.inventory import HostConfig, host_config
from pyinfra_sglang.parsers.system import same_repository
from pyinfra_sglang.paths import template
from roles.common import (
    apt_get,
    apt_lists_updated,
    host_platform,
    put_private_file,
    template_file,
)
from roles.host_driver import host_keeps


class MirrorLoginRefused(PyinfraError):
    """The mirror's user or password cannot be written where apt and curl read it."""


def mirror_login(config: HostConfig, host_name: str) -> tuple[str, tuple[str, str]] | None:
    """The mirror's apt machine (``scheme://host[:port]/path``: apt_auth.conf(5) uses a login
    for http only when the machine names the scheme) and (user, password), or None. A user
    or password apt's and curl's netrc files cannot hold is refused, never shown."""
    if config.nvidia_apt_mirror is None:
        return None
    plain, login = split_login(str(config.nvidia_apt_mirror))
    if login is None:
        return None
    problem = login_problem(login)
    if problem:
        raise MirrorLoginRefused(
            f"host {host_name}: nvidia_apt_mirror: {problem}. Nothing was changed."
        )
    parts = urllib.parse.urlsplit(plain)
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}", login


def apt_login_text(machine: str, login: tuple[str, str]) -> bytes:
    return (
        "# Managed by pyinfra-sglang (roles/nvidia_repo.py): nvidia_apt_mirror's login.\n"
        f"machine {machine} login {login[0]} password {login[1]}\n"
    ).encode()


def _apt_login_written(state, host, path: str) -> bool:
    # Read from the inventory here, not passed in: a FunctionCommand's arguments show in
    # pyinfra's debug output.
    machine, login = mirror_login(host_config(host), host.name)
    put_private_file(host, apt_login_text(machine, login), path, "600", "the mirror's login")
    return True


def _netrc_written(state, host, path: str, src: str) -> bool:
    _, login = mirror_login(host_config(host), host.name)
    netloc = urllib.parse.urlsplit(src).hostname
    text = f"machine {netloc} login {login[0]} password {login[1]}\n".encode()
    put_private_file(host, text, path, "600", "the mirror's login")
    return True


@operation()
def apt_login(path: str):
    """The login of ``nvidia_apt_mirror`` (a URL with user:password) at ``path``, 0600 root,
    where apt reads it (auth.conf.d): the list file, readable by all, holds the URL without
    it. A mirror without a login: no such file. The login is never in a command or output."""
    found = mirror_login(host_config(host), host.name)
    current = read_once(host, File, path=path)
    if found is None:
        if current:
            yield StringCommand("rm", "-f", QuoteString(path))
        else:
            host.noop(f"nvidia_apt_mirror has no login: no {path}")
        return
    wanted = hashlib.sha256(apt_login_text(*found)).hexdigest()
    if (
        current
        and (current.get("user"), current.get("group"), current.get("mode"))
        == ("root", "root", 600)
        and read_once(host, Sha256File, path=path) == wanted
    ):
        host.noop(f"{path} holds nvidia_apt_mirror's login")
        return
    yield FunctionCommand(_apt_login_written, (path,), {})


def nvidia_repo_url(config: HostConfig, platform: Platform) -> str:
    """The flat repository folder for this host: <base>/<distro>/<arch>/."""
    base = str(config.nvidia_apt_mirror or data.nvidia().repo.base_url).rstrip("/")
    return f"{base}/{platform.nvidia_repo}/{platform.nvidia_arch}/"


def _distro_entry(entry: dict, codename: str | None) -> bool:
    """Is ``entry`` one of the distribution's own: every suite the release ``codename`` or a
    pocket of it (bookworm-updates, bookworm-security)? Another vendor's repository with a
    ``main`` (Grafana's ``stable main``) is not, nor is an entry of unknown suite when the
    codename is known."""
    if not codename or "suites" not in entry:
        return True
    suites = entry["suites"]
    return bool(suites) and all(s == codename or s.startswith(f"{codename}-") for s in suites)


@operation()
def apt_components(components: list[str], codename: str | None = None):
    """Add ``components`` to the distribution's apt source entries that carry ``main``
    (Debian's NVIDIA packages need ``contrib``); flat repositories and other vendors' entries
    (their suites not the release's) are left alone.

    + components: the components to add
    + codename: the release's codename (os-release VERSION_CODENAME); unset: every entry
    """
    commands = []
    for entry in read_once(host, AptSourceEntries):
        missing = [c for c in components if c not in entry["components"]]
        if not _distro_entry(entry, codename):
            continue
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
        for entry in read_once(host, RepositoryEntries)
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


def keyring_check(deb: str, sha256: str, fingerprint: str, keyring_path: str) -> str:
    """Shell that fails, naming the hash it found, unless the .deb at ``deb`` has the pinned
    ``sha256``: then it is NVIDIA's package as published, and apt-get may install it."""
    quoted = shlex.quote(deb)
    return (
        f"actual=$(sha256sum {quoted} | cut -d' ' -f1); "
        f'[ "$actual" = {shlex.quote(sha256)} ] || {{ echo "the downloaded keyring\'s '
        f'sha256 is $actual, expected {sha256}: not installing it" >&2; '
        f"rm -f {quoted}; exit 1; }}"
    )


def _member_patterns(allowed: list[str]) -> str:
    """``case`` patterns of the tar members (``./etc/``, ``./etc/apt/x.list``) a keyring .deb
    may hold: the allowed files, a folder's contents for a trailing ``*``, and every parent
    folder of them."""
    patterns = {"'./'"}
    for path in allowed:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            patterns.add(shlex.quote("./" + "/".join(parts[:depth]) + "/"))
        if parts[-1] == "*":
            patterns.add(shlex.quote("./" + "/".join(parts[:-1]) + "/") + "*")
        else:
            patterns.add(shlex.quote("./" + "/".join(parts)))
    return "|".join(sorted(patterns))


def primary_fingerprints(keyring: str, gnupg_home: str) -> str:
    """Shell printing the fingerprint of each primary key (not subkey) in ``keyring``, one a
    line, read without importing it (``gnupg_home``: an empty folder of the caller's)."""
    return (
        f"GNUPGHOME={gnupg_home} gpg --batch --show-keys --with-colons {keyring} 2>/dev/null "
        "| awk -F: '/^pub/ {p = 1; next} p && /^fpr/ {print $10; p = 0}'"
    )


def keyring_unpacked(
    deb: str, folder: str, fingerprint: str, keyring_path: str, allowed: list[str]
) -> str:
    """Shell that unpacks the .deb at ``deb`` into ``folder`` (dpkg-deb -x: no maintainer
    script runs) and fails, naming what it found, and removes both, unless it holds only
    ``allowed`` files (and their folders) and its keyring at ``keyring_path`` is a plain file
    of exactly one key, ``fingerprint``. The key file is then at folder/root/keyring_path."""
    q = shlex.quote
    key = f'"$dir/root"/{q(keyring_path.lstrip("/"))}'
    listing = primary_fingerprints(key, '"$dir/gnupg"')
    hint = "pin nvidia_keyring_sha256 for a mirror that signs with its own key"
    return (
        f"deb={q(deb)}; dir={q(folder)}; "
        'refuse() { echo "$1: not installing it$2" >&2; rm -rf "$dir" "$deb"; exit 1; }; '
        'members=$(dpkg-deb --fsys-tarfile "$deb" | tar -t) || '
        'refuse "the downloaded keyring is not a readable .deb"; '
        'extra=$(printf \'%s\\n\' "$members" | while IFS= read -r m; do case "$m" in '
        "*/../*|*/..) printf '%s ' \"$m\" ;; "
        f"{_member_patterns(allowed)}) ;; "
        "*) printf '%s ' \"$m\" ;; esac; done); "
        '[ -z "$extra" ] || refuse "the downloaded keyring .deb holds what a keyring does '
        'not: ${extra% }"; '
        'rm -rf "$dir" && mkdir -m 700 "$dir" "$dir/gnupg" && dpkg-deb -x "$deb" "$dir/root" '
        '|| refuse "could not unpack the downloaded keyring"; '
        f"{{ [ -f {key} ] && [ ! -L {key} ]; }} || "
        f'refuse "the downloaded keyring .deb has no plain file {keyring_path}"; '
        f"keys=$({listing}); "
        "count=$(printf '%s' \"$keys\" | grep -c .); "
        f'[ "$count" -le 1 ] || refuse "the downloaded keyring carries $count keys '
        f"($(echo $keys)), not only NVIDIA's {fingerprint}\"; "
        f'[ "$keys" = {q(fingerprint)} ] || refuse "the downloaded keyring carries key '
        f'${{keys:-none}}, not NVIDIA\'s {fingerprint}" " ({hint})"'
    )


@operation()
def keyring_installed(
    package: str,
    src: str,
    fingerprint: str,
    keyring_path: str,
    download_dir: str,
    sha256: str | None = None,
    allowed_files: list[str] | None = None,
    netrc: bool = False,
):
    """NVIDIA's repository key, from the cuda-keyring .deb at ``src``, downloaded into the
    root-only ``download_dir`` (curl reads the mirror's login from a 0600 netrc file there
    when ``netrc``: never from its command line).

    With a pinned ``sha256`` the .deb is NVIDIA's as published: apt-get installs it (it waits
    for dpkg's locks), unless dpkg has it already. Without one, dpkg never sees it: its
    maintainer scripts would run as root. keyring_unpacked checks what it holds and the
    key file alone is installed at ``keyring_path``, unless a key file holding NVIDIA's key
    alone is there already."""
    if package in read_once(host, DebPackages):
        host.noop(f"{package} is installed")
        return
    if not sha256:
        present = read_once(host, Command, command=installed_keys_command(keyring_path))
        if (present or "").split() == [fingerprint]:
            host.noop(f"{keyring_path} holds NVIDIA's key {fingerprint} alone")
            return
    folder = QuoteString(download_dir)
    # apt-get takes a local file for a package only by a path ending in .deb.
    deb = f"{download_dir}/{package}.deb"
    # An https URL may not be redirected to plain http.
    protocols = "=https" if src.startswith("https://") else "=http,https"
    yield StringCommand("install", "-d", "-m", "700", "-o", "root", "-g", "root", folder)
    curl = ["curl", "-fsSL", "--proto", protocols, "-o", QuoteString(deb)]
    if netrc:
        netrc_path = f"{download_dir}/{package}.netrc"
        yield FunctionCommand(_netrc_written, (netrc_path, src), {})
        # The file goes whether curl succeeds or not.
        yield StringCommand(
            *curl,
            "--netrc-file",
            QuoteString(netrc_path),
            QuoteString(src),
            "; status=$?; rm -f",
            QuoteString(netrc_path),
            '; [ "$status" -eq 0 ]',
        )
    else:
        yield StringCommand(*curl, QuoteString(src))
    if sha256:
        yield keyring_check(deb, sha256, fingerprint, keyring_path)
        yield apt_get("install", QuoteString(deb))
        yield StringCommand("rm", "-f", QuoteString(deb))
        return
    if allowed_files is None:
        platform = host_platform()
        allowed_files = [
            path.format(distro=platform.nvidia_repo, arch=platform.nvidia_arch)
            for path in data.nvidia().repo.keyring_deb_files
        ]
    unpacked = f"{download_dir}/{package}.d"
    yield keyring_unpacked(deb, unpacked, fingerprint, keyring_path, allowed_files)
    yield StringCommand(
        "install",
        "-D",
        "-m",
        "644",
        "-o",
        "root",
        "-g",
        "root",
        QuoteString(f"{unpacked}/root/{keyring_path.lstrip('/')}"),
        QuoteString(keyring_path),
        "&&",
        "rm",
        "-rf",
        QuoteString(unpacked),
        QuoteString(deb),
    )


def installed_keys_command(keyring_path: str) -> str:
    """The fingerprints of the primary keys in the key file at ``keyring_path``, one a line;
    nothing when there is no such file (or no gpg)."""
    q = shlex.quote(keyring_path)
    listing = primary_fingerprints(q, '"$home"')
    return f'if [ -f {q} ] && home=$(mktemp -d); then {listing}; rm -rf "$home"; fi; true'


def keyring_sha256(config: HostConfig, platform: Platform) -> str | None:
    """The keyring's sha256 to check: the inventory's, else the one pinned in data for the
    platform's repository folder, else None (checked by the key's fingerprint)."""
    pinned = data.nvidia().repo.keyring_sha256
    return config.nvidia_keyring_sha256 or pinned.get(
        f"{platform.nvidia_repo}/{platform.nvidia_arch}"
    )


@deploy("NVIDIA repository")
def nvidia_repo() -> None:
    """Add NVIDIA's CUDA apt repository, signed by NVIDIA's key alone.

    The repository of the host's platform, or its mirror, with the key of `cuda-keyring`,
    checked before any of it is installed. Other entries for it are commented out; Debian gets
    `contrib`. apt's lists are refreshed only when one of these changed.

    + nvidia_apt_mirror: a mirror to use instead; its login goes to apt's auth.conf.d
    + nvidia_keyring_sha256: the cuda-keyring .deb's sha256 (else data/nvidia.toml's)
    + nvidia_driver_source: `host` changes nothing
    """
    config = host_config(host)
    if config.uses_host_driver:
        host_keeps(
            name="Leave the host's apt sources as they are",
            what="NVIDIA's repository",
            reason='nvidia_driver_source = "host" uses the driver and toolkits the host has',
        )
        return
    platform = host_platform()
    repo = data.nvidia().repo
    # The list file, readable by all, and curl's command line get the URL without the
    # mirror's login: apt reads it from auth.conf.d, curl from a 0600 netrc file.
    login = mirror_login(config, host.name)
    url, _ = split_login(nvidia_repo_url(config, platform))

    components = None
    if platform.components:
        # Only the release's own entries: another vendor's `main` (Grafana's, which the
        # monitoring role writes) lacks these components, and both roles would rewrite it.
        release = read_once(host, LinuxDistribution)["release_meta"]
        components = apt_components(
            name="Enable the distro components NVIDIA's packages need",
            components=list(platform.components),
            codename=release.get("VERSION_CODENAME"),
        )

    list_path = repo.list_path.format(distro=platform.nvidia_repo, arch=platform.nvidia_arch)
    # apt's configuration files, read in one command for the operations below: the source
    # entries, the login file, the role's list file.
    read_together(
        host,
        (AptSourceEntries, {}),
        (RepositoryEntries, {}),
        (File, {"path": repo.auth_path}),
        (FileStates, {"paths": (list_path,)}),
    )
    nvidia_url = f"{repo.base_url}/{platform.nvidia_repo}/{platform.nvidia_arch}/"
    others = other_entries_disabled(
        name="Disable other apt entries for NVIDIA's repository",
        urls=sorted({url, nvidia_url}),
        own_file=list_path,
    )
    credentials = apt_login(name="Give apt the mirror's login (auth.conf.d)", path=repo.auth_path)
    keyring = keyring_installed(
        name="Install NVIDIA's repository signing key (cuda-keyring)",
        package=repo.keyring_package,
        src=url + repo.keyring_deb,
        sha256=keyring_sha256(config, platform),
        fingerprint=repo.signing_key_fingerprint,
        keyring_path=repo.keyring_path,
        download_dir=repo.download_dir,
        netrc=login is not None,
    )
    source = template_file(
        name="Point apt at NVIDIA's repository",
        src=template("cuda-repo.list.j2"),
        dest=list_path,
        keyring_path=repo.keyring_path,
        repo_url=url,
        user="root",
        group="root",
        mode="644",
    )
    changed = [op for op in (components, others, credentials, keyring, source) if op is not None]
    apt_lists_updated(name="Refresh apt after a repository change", _if=any_changed(*changed))
