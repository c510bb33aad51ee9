"""An nvidia_apt_mirror with a login (https://user:password@mirror/...): the list file, which
every local user can read, and curl's command line get the URL without it; apt reads it from
a 0600 root file in auth.conf.d, curl from a 0600 netrc file. No command holds it."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from pydantic import HttpUrl
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, Sha256File

from pyinfra_sglang.inventory import HostConfig
from roles import nvidia_repo
from roles.nvidia_repo import (
    MirrorLoginRefused,
    apt_login,
    apt_login_text,
    keyring_installed,
    mirror_login,
    split_login,
)
from tests.unit.ophelper import run_operation

PASSWORD = "s3cret-p%40ss"  # percent-encoded in the URL: p@ss
MIRROR = f"https://deploy:{PASSWORD}@mirror.example:8443/cuda/"
AUTH = "/etc/apt/auth.conf.d/pyinfra-sglang-nvidia.conf"
SECRETS = ("s3cret", "p@ss", "p%40ss")


def config(mirror: str | None = MIRROR) -> HostConfig:
    return HostConfig(nvidia_apt_mirror=mirror)


def test_the_url_loses_its_login_and_the_login_is_decoded():
    assert split_login(MIRROR) == (
        "https://mirror.example:8443/cuda/",
        ("deploy", "s3cret-p@ss"),
    )
    assert split_login("https://mirror.example/cuda/") == ("https://mirror.example/cuda/", None)


def test_apts_machine_names_scheme_port_and_path():
    # apt_auth.conf(5): without a scheme a login is used for https only.
    assert mirror_login(config(), "gpu-1") == (
        "https://mirror.example:8443/cuda",
        ("deploy", "s3cret-p@ss"),
    )
    plain = HostConfig(
        nvidia_apt_mirror="http://u:p@127.0.0.1:8080", nvidia_keyring_sha256="a" * 64
    )
    assert mirror_login(plain, "gpu-1") == ("http://127.0.0.1:8080", ("u", "p"))
    assert mirror_login(config(None), "gpu-1") is None
    assert mirror_login(config("https://mirror.example/"), "gpu-1") is None
    assert apt_login_text("http://127.0.0.1:8080", ("u", "p")).decode().splitlines()[-1] == (
        "machine http://127.0.0.1:8080 login u password p"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://deploy:two%20words@mirror.example/",
        "https://deploy@mirror.example/",
        # curl reads a netrc token starting with '#' as a comment: an empty password sent.
        "https://deploy:%23secret@mirror.example/",
    ],
)
def test_a_login_a_netrc_file_cannot_hold_is_refused_without_showing_it(url):
    # Validation refuses it first (issue 35 N11: a user-only login passed validate, and only
    # the deploy refused it) ...
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("gpu-1", {"nvidia_apt_mirror": url})
    assert problem.field == "nvidia_apt_mirror" and "apt's auth.conf cannot hold" in str(problem)
    assert "two" not in str(problem) and "deploy" not in str(problem)
    # ... and the role still would, were it given one.
    unchecked = config().model_copy(update={"nvidia_apt_mirror": HttpUrl(url)})
    with pytest.raises(MirrorLoginRefused) as refused:
        mirror_login(unchecked, "gpu-1")
    message = str(refused.value)
    assert "host gpu-1: nvidia_apt_mirror" in message and "two" not in message


def commands_of(op, facts, mirror=MIRROR, **args):
    with patch.object(nvidia_repo, "host_config", return_value=config(mirror)):
        return run_operation(op, facts, **args)


def test_apt_gets_the_login_from_a_private_file_never_a_command():
    commands, noops = commands_of(apt_login, {File: None}, path=AUTH)
    assert noops == [] and len(commands) == 1
    assert commands == [f"FunctionCommand(_apt_login_written, ({AUTH!r},), {{}})"]
    assert not any(secret in c for c in commands for secret in SECRETS), commands


def test_the_login_file_in_place_is_a_noop_and_a_wrong_mode_is_rewritten():
    import hashlib

    digest = hashlib.sha256(apt_login_text(*mirror_login(config(), "gpu-1"))).hexdigest()
    right = {"user": "root", "group": "root", "mode": 600}
    commands, noops = commands_of(apt_login, {File: right, Sha256File: digest}, path=AUTH)
    assert commands == [] and noops == [f"{AUTH} holds nvidia_apt_mirror's login"]
    for stale in ({**right, "mode": 644}, {**right, "user": "deploy"}):
        commands, _ = commands_of(apt_login, {File: stale, Sha256File: digest}, path=AUTH)
        assert len(commands) == 1
    commands, _ = commands_of(apt_login, {File: right, Sha256File: "0" * 64}, path=AUTH)
    assert len(commands) == 1


def test_a_mirror_without_a_login_removes_the_file():
    commands, _ = commands_of(
        apt_login, {File: {"mode": 600}}, mirror="https://mirror.example/", path=AUTH
    )
    assert commands == [f"rm -f {AUTH}"]
    commands, noops = commands_of(apt_login, {File: None}, mirror=None, path=AUTH)
    assert commands == [] and noops == [f"nvidia_apt_mirror has no login: no {AUTH}"]


def test_the_login_files_are_written_private_with_the_login():
    written = []

    def put(host_, content, path, mode, what):
        written.append((content.decode(), path, mode))

    class Host:
        name = "gpu-1"

    with (
        patch.object(nvidia_repo, "host_config", return_value=config()),
        patch.object(nvidia_repo, "put_private_file", side_effect=put),
    ):
        nvidia_repo._apt_login_written(None, Host(), AUTH)
        nvidia_repo._netrc_written(
            None, Host(), "/d/cuda-keyring.netrc", "https://mirror.example:8443/cuda/x.deb"
        )
    assert written == [
        (
            "# Managed by pyinfra-sglang (roles/nvidia_repo.py): nvidia_apt_mirror's login.\n"
            "machine https://mirror.example:8443/cuda login deploy password s3cret-p@ss\n",
            AUTH,
            "600",
        ),
        (
            "machine mirror.example login deploy password s3cret-p@ss\n",
            "/d/cuda-keyring.netrc",
            "600",
        ),
    ]


def test_curl_reads_the_login_from_a_netrc_file_removed_after_it():
    src = "https://mirror.example:8443/cuda/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
    commands, _ = commands_of(
        keyring_installed,
        {DebPackages: {}},
        package="cuda-keyring",
        src=src,
        fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC",
        keyring_path="/usr/share/keyrings/cuda-archive-keyring.gpg",
        download_dir="/var/lib/pyinfra-sglang/downloads",
        sha256="0" * 64,
        netrc=True,
    )
    assert not any(secret in c for c in commands for secret in SECRETS), commands
    netrc = "/var/lib/pyinfra-sglang/downloads/cuda-keyring.netrc"
    [curl] = [c for c in commands if c.startswith("curl ")]
    assert curl == (
        "curl -fsSL --proto =https -o /var/lib/pyinfra-sglang/downloads/cuda-keyring.deb "
        f'--netrc-file {netrc} {src} ; status=$?; rm -f {netrc} ; [ "$status" -eq 0 ]'
    )
    assert commands.index(curl) == 2 and "_netrc_written" in commands[1]
