"""The one way the controller writes a file: never through a link, never into a FIFO.

Results folders, tune folders and report folders may come from elsewhere (copied from a
colleague, a shared drive, a folder another user can write). A symbolic link planted at a
file's name would make a plain ``write_text`` overwrite whatever it points at (a user's
``authorized_keys``); a FIFO would hang the writer. So every file is written to a new
temporary name in its folder (``O_CREAT | O_EXCL | O_NOFOLLOW``) and renamed over its own
name: a rename replaces the name, it follows no link. What is already at the name must be a
plain file (or nothing); the folder itself must not be a symbolic link. With ``dir_fd``
support (Linux) the folder is opened once, without following a link, and every step is
relative to it, so a folder swapped for a link meanwhile is not written through either.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FD = {os.open, os.lstat, os.replace, os.unlink, os.readlink} <= os.supports_dir_fd


class UnsafeOutputError(OSError):
    """An output path that is a symbolic link or not a plain file: refused."""


def _link_text(link: str, dir_fd: int | None) -> str:
    try:
        return f" (to {os.readlink(link, dir_fd=dir_fd)})"
    except OSError:
        return ""


def refuse_link(path: Path, what: str = "the output folder") -> None:
    if path.is_symlink():
        raise UnsafeOutputError(
            f"{path}: {what} is a symbolic link{_link_text(str(path), None)}: refusing to "
            "write through it (remove it, or write elsewhere)"
        )


class OutputFolder:
    """A folder (made if missing; refused when it is a symbolic link), held open so that
    every file is written in that folder and nowhere else."""

    def __init__(self, folder: str | Path, mode: int = 0o777):
        self.path = Path(folder)
        refuse_link(self.path)
        self.path.mkdir(mode=mode, parents=True, exist_ok=True)
        self.fd = None
        if _DIR_FD:
            flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
            try:
                self.fd = os.open(self.path, flags)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    refuse_link(self.path)
                raise
        else:
            refuse_link(self.path)

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _name(self, name: str) -> str:
        return name if self.fd is not None else str(self.path / name)

    def _existing(self, name: str) -> os.stat_result | None:
        path, where = self.path / name, self._name(name)
        try:
            found = os.lstat(where, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(found.st_mode):
            raise UnsafeOutputError(
                f"{path}: a symbolic link{_link_text(where, self.fd)}: refusing to write "
                "through it (remove it, or write elsewhere)"
            )
        if not stat.S_ISREG(found.st_mode):
            raise UnsafeOutputError(f"{path}: not a plain file: refusing to replace it")
        return found

    def check_private(self) -> None:
        """Refuse a folder someone else owns or that users other than its owner may write
        (its group included): what it holds could have been put there by another user (a
        planted results folder)."""
        found = os.fstat(self.fd) if self.fd is not None else os.lstat(self.path)
        if found.st_uid != os.geteuid() or found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafeOutputError(
                f"{self.path}: owned by another user or writable by its group or every user: "
                "refusing to trust what it holds (chmod go-w it, or resume from your own)"
            )

    def read(self, name: str, private: bool = False) -> bytes | None:
        """The plain file ``name`` in the folder (None when there is none), opened without
        following a link and refused when it is anything but a plain file. ``private``: also
        refused when another user owns it or others than its owner may write it."""
        if self._existing(name) is None:
            return None
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(self._name(name), flags, dir_fd=self.fd)
        with os.fdopen(fd, "rb") as file:
            found = os.fstat(file.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise UnsafeOutputError(f"{self.path / name}: not a plain file: refusing it")
            if private and (
                found.st_uid != os.geteuid() or found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            ):
                raise UnsafeOutputError(
                    f"{self.path / name}: owned by another user or writable by others: "
                    "refusing to trust it"
                )
            return file.read()

    def write(self, name: str, data: bytes | str, mode: int = 0o666) -> Path:
        """Write ``data`` as the file ``name`` in the folder (``mode`` before the umask); its
        path."""
        if isinstance(data, str):
            data = data.encode()
        path = self.path / name
        self._existing(name)
        temp = self._name(f".{name}.{secrets.token_hex(8)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0)
        fd = os.open(temp, flags, mode, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            # A rename replaces whatever took the name meanwhile; it follows no link.
            os.replace(temp, self._name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        return path

    def append(
        self, name: str, data: bytes | str, limit: int | None = None, private: bool = False
    ) -> Path:
        """``name`` with ``data`` added at its end, written anew by rename (a journal: small,
        and never appended to through a link). ``limit``: the most bytes the file may hold;
        ``private``: the file the user's alone (read as such, written 0600)."""
        if isinstance(data, str):
            data = data.encode()
        before = self.read(name, private) or b""
        if limit is not None and len(before) + len(data) > limit:
            raise UnsafeOutputError(
                f"{self.path / name}: would grow past {limit} bytes: refusing to append"
            )
        return self.write(name, before + data, 0o600 if private else 0o666)


def write_file(path: str | Path, data: bytes | str) -> Path:
    """Write one file safely (see the module's docstring); its folder is made if missing."""
    path = Path(path)
    with OutputFolder(path.parent) as folder:
        return folder.write(path.name, data)


def read_file(path: str | Path) -> bytes | None:
    """A plain file's bytes (None when missing): never through a link, never a FIFO."""
    path = Path(path)
    if not path.parent.is_dir():
        return None
    with OutputFolder(path.parent) as folder:
        return folder.read(path.name)
