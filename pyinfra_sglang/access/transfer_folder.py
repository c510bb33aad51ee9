"""The folder file transfers pass through when pyinfra runs commands under sudo (doas, dzdo,
su).

SFTP runs as the SSH user, so pyinfra's SSH connector uploads to a temporary file first and
then copies it into place as root (``cp``); a download is copied out by root into such a file
and made readable. The file is ``<_temp_dir>/pyinfra-<sha1 of the destination>``
(pyinfra/api/host.py ``get_temp_filename``), and ``_temp_dir`` defaults to ``$TMPDIR`` or
``/tmp``. Anyone on the host can compute that name: a file planted there ahead of time (or a
symlink, where fs.protected_symlinks is 0) gets the SSH user's upload written into it, hands
the attacker the content root then installs, or points root's copy of a download anywhere.

So under elevation every transfer goes through a folder only the SSH user can enter:
``~/.cache/pyinfra-sglang/transfer`` of the SSH user (0700), or the inventory's own
``_temp_dir``, which must already be such a folder. ``folder_action`` judges what the host has
(checks.facts.PrivateFolder)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

# Under the SSH user's home; created 0700 by roles/transfers.py.
DEFAULT_FOLDER = ".cache/pyinfra-sglang/transfer"

# The connector arguments under which pyinfra transfers through a temporary file.
ELEVATING = ("_sudo", "_doas", "_dzdo", "_su_user")

# Global arguments that make a fact or command run as the SSH user itself.
UNELEVATED = {
    "_sudo": False,
    "_sudo_user": None,
    "_doas": False,
    "_doas_user": None,
    "_dzdo": False,
    "_dzdo_user": None,
    "_su_user": None,
}


def elevated(arguments: dict) -> bool:
    """Whether ``arguments`` (an operation's global arguments) run commands as another user."""
    return any(arguments.get(key) for key in ELEVATING)


@dataclass(frozen=True)
class FolderState:
    """What the host has at the transfer folder, read as the SSH user."""

    path: str  # absolute ("" when the home folder is unknown)
    uid: int | None  # the SSH user's
    kind: str  # "folder", "missing", "link", "other" or "unread"
    owner: int | None = None  # the folder's owner's uid
    mode: int | None = None  # its permission bits


def folder_state_command(path: str) -> str:
    """Shell that prints the state of ``path`` (relative: to the SSH user's home) as
    ``path``, ``uid`` and ``state`` lines; parse_folder_state reads them."""
    where = shlex.quote(path) if path.startswith("/") else f'"$HOME"/{shlex.quote(path)}'
    return (
        f'f={where}; printf \'path %s\\nuid %s\\n\' "$f" "$(id -u)"; '
        'if [ -L "$f" ]; then echo "state link"; '
        'elif [ -d "$f" ]; then stat -c "state folder %u %a" -- "$f"; '
        'elif [ -e "$f" ]; then echo "state other"; '
        'else echo "state missing"; fi'
    )


def parse_folder_state(output: Iterable[str]) -> FolderState:
    """The ``path``, ``uid`` and ``state`` lines of folder_state_command. A path with a
    control character, or lines that do not parse, read as ``unread``."""
    lines = [line.rstrip("\n") for line in output]
    values = {}
    for line in lines:
        key, _, value = line.partition(" ")
        values.setdefault(key, value)
    path, uid, state = values.get("path", ""), values.get("uid", ""), values.get("state", "")
    fields = state.split(" ")
    clean = path.startswith("/") and path.isprintable() and "//" not in path
    if not clean or not uid.isdigit() or len(lines) != 3:
        return FolderState(path=path if clean else "", uid=None, kind="unread")
    if fields[0] == "folder" and len(fields) == 3 and fields[1].isdigit():
        try:
            mode = int(fields[2], 8)
        except ValueError:
            return FolderState(path=path, uid=int(uid), kind="unread")
        return FolderState(path=path, uid=int(uid), kind="folder", owner=int(fields[1]), mode=mode)
    if fields[0] in ("missing", "link", "other") and len(fields) == 1:
        return FolderState(path=path, uid=int(uid), kind=fields[0])
    return FolderState(path=path, uid=int(uid), kind="unread")


def folder_action(found: FolderState, ours: bool) -> tuple[str, str]:
    """What to do with the transfer folder: ("ok" | "create" | "restrict" | "refuse", why).

    ``ours``: the default folder, which the role creates and narrows to 0700; a folder the
    inventory names (``_temp_dir``) is only checked."""
    way_out = (
        "set _temp_dir in the host's data to a folder only the SSH user can enter "
        "(owned by it, mode 0700)"
    )
    where = found.path or "the transfer folder"
    if found.kind == "unread":
        return "refuse", f"could not read the state of {where} as the SSH user; {way_out}"
    if found.kind == "folder":
        if found.owner != found.uid:
            return "refuse", f"{where} belongs to uid {found.owner}, not the SSH user; {way_out}"
        if found.mode is not None and found.mode & 0o077 == 0:
            return "ok", f"{where} is the SSH user's, mode {found.mode:04o}"
        if ours:
            return "restrict", f"{where} is mode {found.mode:04o}: narrowed to 0700"
        return "refuse", f"{where} is mode {found.mode:04o}: others can enter it; {way_out}"
    if found.kind == "missing":
        if ours:
            return "create", f"{where} is created, mode 0700"
        return "refuse", f"{where} does not exist; {way_out}"
    what = "a symlink" if found.kind == "link" else "not a folder"
    return "refuse", f"{where} is {what}; {way_out}"
