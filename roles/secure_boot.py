"""Secure Boot: before the driver is installed, a host with Secure Boot on must have a MOK
key pair to sign the NVIDIA module with, enrolled; the pair is then put where DKMS signs
from. Refused at planning, so nothing changes on any host."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pyinfra import host
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import PyinfraError

from checks.facts import FileDigests, MokEnrolled, SecureBootState, read_once
from pyinfra_sglang.driver.secure_boot import (
    MokPair,
    mok_paths,
    read_mok_pair,
    secure_boot_refusal,
)
from pyinfra_sglang.inventory import HostConfig
from roles.common import put_private_file


class SecureBootRefused(PyinfraError):
    """Secure Boot is on and the NVIDIA module could not be signed by an enrolled key."""


def secure_boot_preflight(config: HostConfig) -> MokPair | None:
    """The key pair to sign the module with when Secure Boot is on; None when it is off.
    Raises SecureBootRefused (at planning: before any change) when it is on and there is no
    pair, or its key is not enrolled."""
    state = read_once(host, SecureBootState)
    pair = read_mok_pair(config.nvidia_mok_key_file, config.nvidia_mok_cert_file)
    enrolled = None
    if state["enabled"] and pair is not None:
        enrolled = read_once(host, MokEnrolled, cert_base64=pair.cert_base64())
    refusal = secure_boot_refusal(host.name, state, pair, enrolled)
    if refusal:
        raise SecureBootRefused(refusal)
    return pair if state["enabled"] else None


def _put(state, host, key_file: str, cert_file: str, paths: dict[str, str]) -> bool:
    # pyinfra passes (state, host) to a FunctionCommand function that names them so. The
    # pair is read here, not passed in: a FunctionCommand's arguments show in pyinfra's
    # debug output, and the key must not.
    pair = read_mok_pair(Path(key_file), Path(cert_file))
    if "key" in paths:
        put_private_file(host, pair.key, paths["key"], "600", "the MOK private key")
    if "cert" in paths:
        put_private_file(host, pair.cert, paths["cert"], "644", "the MOK certificate")
    return True


@operation()
def mok_key_pair_installed(key_file: str, cert_file: str, family: str):
    """The MOK key pair where DKMS signs from on this family of distros: the key root 0600,
    created with that mode before any content is written; only what differs is written."""
    pair = read_mok_pair(Path(key_file), Path(cert_file))
    paths = mok_paths(family)
    current = read_once(host, FileDigests, paths=sorted(paths.values()))
    stale = {
        kind: path
        for kind, path in paths.items()
        if current.get(path) != hashlib.sha256(getattr(pair, kind)).hexdigest()
    }
    if not stale:
        host.noop(f"the MOK key pair is in {paths['key']} and {paths['cert']}")
        return
    yield FunctionCommand(_put, (key_file, cert_file, stale), {})
