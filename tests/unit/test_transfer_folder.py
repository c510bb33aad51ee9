"""The transfer folder under sudo (pyinfra_sglang.access.transfer_folder): its state read back
from the real shell command run here, and what the role does with each state."""

from __future__ import annotations

import os
import subprocess

import pytest

from pyinfra_sglang.access.transfer_folder import (
    FolderState,
    elevated,
    folder_action,
    folder_state_command,
    parse_folder_state,
)


def _read(path: str, home) -> FolderState:
    done = subprocess.run(
        ["sh", "-c", folder_state_command(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        check=True,
    )
    return parse_folder_state(done.stdout.splitlines())


def test_each_state_of_the_folder_is_read_from_the_shell(tmp_path):
    uid = os.getuid()
    missing = _read(".cache/pyinfra-sglang/transfer", tmp_path)
    assert missing == FolderState(f"{tmp_path}/.cache/pyinfra-sglang/transfer", uid, "missing")
    folder = tmp_path / "t"
    folder.mkdir(mode=0o750)
    folder.chmod(0o750)
    assert _read("t", tmp_path) == FolderState(str(folder), uid, "folder", uid, 0o750)
    assert _read(str(folder), "/nonexistent").path == str(folder)  # absolute: not under home
    (tmp_path / "link").symlink_to(folder)
    assert _read("link", tmp_path).kind == "link"
    (tmp_path / "file").write_text("")
    assert _read("file", tmp_path).kind == "other"
    odd = tmp_path / "a b'$(x)"
    odd.mkdir(mode=0o700)
    odd.chmod(0o700)
    assert _read(odd.name, tmp_path) == FolderState(str(odd), uid, "folder", uid, 0o700)


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["path relative/x", "uid 0", "state missing"],  # not absolute
        ["path /a\x1b[2J", "uid 0", "state missing"],  # a control character
        ["path /a", "uid x", "state missing"],
        ["path /a", "uid 0", "state folder 0 7x9"],
        ["path /a", "uid 0", "state folder 0"],
        ["path /a", "uid 0", "state gone"],
        ["path /a", "uid 0", "state missing", "state link"],  # a home with a newline
    ],
)
def test_what_does_not_parse_is_unread(lines):
    assert parse_folder_state(lines).kind == "unread"


@pytest.mark.parametrize(
    ("found", "ours", "action"),
    [
        (FolderState("/h/t", 1000, "folder", 1000, 0o700), True, "ok"),
        (FolderState("/h/t", 1000, "folder", 1000, 0o700), False, "ok"),
        (FolderState("/h/t", 1000, "folder", 1000, 0o500), False, "ok"),
        (FolderState("/h/t", 1000, "folder", 1000, 0o755), True, "restrict"),
        (FolderState("/h/t", 1000, "folder", 1000, 0o701), False, "refuse"),
        (FolderState("/h/t", 1000, "folder", 0, 0o700), True, "refuse"),
        (FolderState("/h/t", 1000, "missing"), True, "create"),
        (FolderState("/h/t", 1000, "missing"), False, "refuse"),
        (FolderState("/h/t", 1000, "link"), True, "refuse"),
        (FolderState("/h/t", 1000, "other"), True, "refuse"),
        (FolderState("", None, "unread"), True, "refuse"),
    ],
)
def test_the_role_creates_narrows_or_refuses(found, ours, action):
    done, why = folder_action(found, ours)
    assert done == action, why
    if action == "refuse":
        assert "_temp_dir" in why and (found.path or "transfer folder") in why


def test_only_arguments_that_change_user_are_elevation():
    assert not elevated({})
    assert not elevated({"_sudo": False, "_su_user": None, "_temp_dir": "/x"})
    assert elevated({"_sudo": True})
    assert elevated({"_su_user": "root"})
    assert elevated({"_doas": True}) and elevated({"_dzdo": True})
