"""File transfers under sudo through a folder only the SSH user can enter.

pyinfra's files.put and files.template, under sudo (doas, dzdo, su), upload as the SSH user
to ``<_temp_dir>/pyinfra-<sha1 of the destination>`` and copy that into place as root: in
``/tmp`` by default, where anyone can plant that name first
(pyinfra_sglang.access.transfer_folder). ``transfer_folder`` points the host's ``_temp_dir``
(pyinfra's own argument) at the SSH user's ``~/.cache/pyinfra-sglang/transfer``, mode 0700,
created as the SSH user; a ``_temp_dir`` the inventory sets is checked instead. Without
elevation pyinfra writes straight into place, and nothing is done.
"""

from __future__ import annotations

import shlex

from pyinfra import host, state
from pyinfra.api import OperationError, deploy, operation
from pyinfra.api.arguments import pop_global_arguments

from checks.facts import PrivateFolder, read_once
from pyinfra_sglang.access.transfer_folder import (
    DEFAULT_FOLDER,
    UNELEVATED,
    elevated,
    folder_action,
)


@operation()
def transfer_folder_private(path: str, ours: bool):
    """The transfer folder ``path`` (relative: to the SSH user's home) exists, belongs to the
    SSH user and only it can enter it; run unelevated. ``ours``: the default folder, created
    or narrowed to 0700 here; else only checked, and refused with the way out."""
    found = read_once(host, PrivateFolder, path=path, **UNELEVATED)
    action, why = folder_action(found, ours)
    if action == "ok":
        host.noop(why)
        return
    if action == "refuse":
        raise OperationError(f"host {host.name}: _temp_dir: {why}")
    q = shlex.quote(found.path)
    # mkdir -m sets the mode of the last folder only, from its creation on.
    yield f"mkdir -p -m 700 -- {q}" if action == "create" else f"chmod 700 -- {q}"


@deploy("Transfer folder")
def transfer_folder() -> None:
    """Under sudo, pass file transfers through a folder only the SSH user can enter.

    ~/.cache/pyinfra-sglang/transfer (0700), not /tmp; runs before the first upload. pyinfra's
    own ``_temp_dir`` in the host's data names another such folder (checked). Without
    elevation (doas, dzdo and su count too), nothing.
    """
    arguments, _ = pop_global_arguments(state, host, {})
    if not elevated(arguments):
        return
    chosen = arguments.get("_temp_dir")
    path = str(chosen or DEFAULT_FOLDER)
    found = read_once(host, PrivateFolder, path=path, **UNELEVATED)
    folder = {}
    if found.path:
        # For every later operation; this deploy's own arguments were read before it.
        host.data._temp_dir = found.path
        folder = {"_temp_dir": found.path}
    transfer_folder_private(
        name="Pass file transfers under sudo through a folder only the SSH user can enter",
        path=path,
        ours=not chosen,
        **UNELEVATED,
        **folder,
    )
