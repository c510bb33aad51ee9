"""Does the controller's known_hosts file hold a host's key? Read with OpenSSH's own
``ssh-keygen -F`` (hashed entries, ``[host]:port`` for another port, comma lists and
wildcards as OpenSSH matches them), so that validation can say, before a deploy, that
pyinfra with ``ssh_strict_host_key_checking = yes`` would refuse to connect, and how to
add the key (docs/security.md#ssh-host-keys)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HOW_TO_ADD = "docs/security.md#ssh-host-keys"
# Seconds ssh-keygen may take to search a file: a known_hosts file is read in milliseconds.
SEARCH_TIMEOUT_S = 10


def ssh_name(address: str, port: int) -> str:
    """The name known_hosts stores a host under: ``host``, or ``[host]:port`` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def known_host_gap(path: str | Path, address: str, port: int = 22) -> str | None:
    """Why ``path`` does not vouch for ``address``:``port`` (the file is missing or unreadable,
    holds no key for it), or None when it holds one. ``ssh-keygen`` missing: said too."""
    path = Path(path)
    if not path.is_file():
        where = path if path.is_absolute() else Path.cwd() / path
        return f"the file {where} does not exist"
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        return "not checked: ssh-keygen (openssh-client) is not installed here"
    name = ssh_name(address, port)
    try:
        done = subprocess.run(
            [keygen, "-F", name, "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=SEARCH_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"not checked: ssh-keygen -F took over {SEARCH_TIMEOUT_S} s on {path}"
    except OSError as error:
        return f"not checked: {path}: {error.strerror}"
    # ssh-keygen -F: exit 0 and the matching lines when found, 1 when not (or unreadable).
    if done.returncode == 0 and done.stdout.strip():
        return None
    if done.stderr.strip():
        return f"ssh-keygen could not read {path}: {done.stderr.strip().splitlines()[-1]}"
    return f"{path} holds no key for {name}"


def how_to_add(address: str, port: int, path: str | Path) -> str:
    """The commands that add the key, after its fingerprint was checked another way."""
    port_option = "" if port == 22 else f"-p {port} "
    return (
        f"fetch it with `ssh-keyscan -t ed25519 {port_option}{address} > /tmp/host.keys`, "
        "compare `ssh-keygen -lf /tmp/host.keys` with the fingerprint read on the host's "
        f"console, then `cat /tmp/host.keys >> {path}` ({HOW_TO_ADD})"
    )
