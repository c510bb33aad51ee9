"""Inventories read the way the pyinfra CLI reads them, and each host's validated config,
validated once per inventory."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.inventory.problems import InventoryError
from pyinfra_sglang.inventory.validation import validate_inventory

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory

    from pyinfra_sglang.config import HostConfig


# Validated once per inventory object: the deploy file runs once per host. Keyed weakly by
# the object itself, not its id(): a freed inventory's id is reused by the next one, which
# then got the stale configs.
_validated: WeakKeyDictionary[Inventory, dict[str, HostConfig]] = WeakKeyDictionary()


_validating: threading.Lock | None = None


def _validation_lock() -> threading.Lock:
    """One lock for validating, made on first use: by then the pyinfra CLI has patched
    threading for gevent, so a host's greenlet waiting on it lets the others run."""
    global _validating
    if _validating is None:
        _validating = threading.Lock()
    return _validating


def host_config(host: Host) -> HostConfig:
    """The validated config of ``host``; validates the whole inventory on first use.
    pyinfra runs the deploy file for every host at once, in greenlets; validation yields
    (ssh-keygen reads known_hosts), so without the lock every host validated every host:
    n x n host checks and ssh-keygen runs instead of n."""
    inventory = host.inventory
    if inventory not in _validated:
        with _validation_lock():
            if inventory not in _validated:
                _validated[inventory] = validate_inventory(inventory)
    return _validated[inventory][host.name]


class InventoryFileError(InventoryError):
    """An inventory file that cannot be read or run (not text, a syntax error, an exception)."""

    def __init__(self, message: str):
        self.problems = []
        PyinfraError.__init__(self, message)


def load_inventory_file(path: str, override_data: dict[str, Any] | None = None) -> Inventory:
    """Load an inventory the way the pyinfra CLI does, without connecting to any host.
    InventoryFileError, never a traceback, when the file is not a Python inventory."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.exceptions import UnexpectedExternalError
    from pyinfra_cli.inventory import make_inventory

    # pyinfra caches compiled files by the name given: make it absolute, so two inventories
    # called inv.py in two folders stay two.
    if Path(path).exists():
        path = str(Path(path).resolve())
    # pyinfra executes inventory files inside a State context.
    try:
        with ctx_state.use(State()):
            return make_inventory(path, override_data=override_data or {}, cwd=str(Path.cwd()))
    except UnicodeDecodeError as error:
        raise InventoryFileError(
            f"cannot read inventory {path}: not UTF-8 text (byte {error.start}); an inventory "
            "is a Python file"
        ) from None
    except (SyntaxError, ValueError) as error:
        raise InventoryFileError(f"cannot read inventory {path}: {error}") from None
    except OSError as error:
        raise InventoryFileError(f"cannot read inventory {path}: {error.strerror}") from None
    except UnexpectedExternalError as error:
        inner = error.exception
        line = getattr(inner, "lineno", None)
        traceback = getattr(inner, "_traceback", None)
        while traceback is not None and traceback.tb_next is not None:
            traceback = traceback.tb_next
        line = line or (traceback.tb_lineno if traceback is not None else None)
        where = f" (line {line})" if line else ""
        raise InventoryFileError(
            f"inventory {error.filename}{where} raised {type(inner).__name__}: {inner}"
        ) from None
