"""Secret files on the controller (API keys, the Hub token, passwords): read, checked, never
shown. The inventory names each by a ``*_file`` field."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from pyinfra import logger
from pyinfra.api.exceptions import OperationError

# A secret file holds one line: an API key or a token. Anything larger is a mistaken path.
MAX_SECRET_BYTES = 4096

# The inventory fields naming secret files on the controller, and what each holds.
SECRET_FIELDS = {
    "sglang_api_key_file": "API key",
    "hf_token_file": "Hugging Face token",
    "sglang_router_api_key_file": "router API key",
    "grafana_admin_password_file": "Grafana admin password",
}


class SecretFileError(OperationError):
    """A secret file on the controller is missing, unreadable, too large, not one line of
    printable text, or empty. ``field``: the inventory field that names it."""

    def __init__(self, message: str, field: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason or message


# Files already warned about in this process: the role and the audit read each file again.
_warned_readable: set[str] = set()


def read_secret(
    path: Path | None,
    field: str,
    host_name: str,
    warn: Callable[[str], None] | None = None,
) -> str | None:
    """The secret in the controller file ``path`` (named by the inventory field ``field``):
    one line of printable text, at most MAX_SECRET_BYTES, surrounding whitespace stripped.
    SecretFileError naming host, field and file otherwise; the content is never shown.
    Warns (once per file) when group or others may read the file."""
    if path is None:
        return None
    what = SECRET_FIELDS.get(field, "secret")

    def refuse(problem: str) -> SecretFileError:
        reason = f"the {what} file {path}: {problem}"
        return SecretFileError(f"host {host_name}: {field}: {reason}", field, reason)

    expanded = Path(path).expanduser()
    try:
        # Non-blocking: opening a FIFO for reading would wait for a writer forever.
        descriptor = os.open(expanded, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise refuse(f"cannot read it: {error.strerror}") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise refuse("not a regular file")
    with os.fdopen(descriptor, "rb") as handle:
        try:
            raw = handle.read(MAX_SECRET_BYTES + 1)
        except OSError as error:
            raise refuse(f"cannot read it: {error.strerror}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise refuse(f"larger than {MAX_SECRET_BYTES} bytes: a key file holds one line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("not UTF-8 text: a key file holds one line of printable text") from None
    secret = text.strip()
    if not secret:
        raise refuse("empty")
    if "\n" in secret or "\r" in secret:
        raise refuse("more than one line: a key file holds the key alone, on one line")
    if not secret.isprintable():
        raise refuse("control or other non-printable characters: a key is printable text")
    if info.st_mode & 0o077 and str(expanded) not in _warned_readable:
        _warned_readable.add(str(expanded))
        (warn or logger.warning)(
            f"warning: host {host_name}: {field} {path} ({what}) can be read by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
        )
    return secret
