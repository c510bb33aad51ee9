"""An nftables table of this project's own, loaded by a oneshot unit at boot: what the
multi-node and the metrics firewall roles share. The role writes the rules and the unit; these
helpers run the unit (and reload changed rules into a table loaded before this run), or remove
it all with one read on the many hosts that never had it."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from pyinfra import host
from pyinfra.facts.systemd import SystemdStatus
from pyinfra.operations import files, server, systemd

from checks.facts import UnitLeftovers, read_once
from roles.common import packages_installed

if TYPE_CHECKING:
    from pyinfra.api.operation import OperationMeta


def rules_folder(rules_path: str) -> None:
    """nftables installed, and the root-only folder the table's rules file goes in."""
    packages_installed(name="Install nftables", packages=["nftables"])
    files.directory(
        name="Folder of the firewall's rules",
        path=str(PurePosixPath(rules_path).parent),
        user="root",
        group="root",
        mode="700",
    )


def table_loaded(
    what: str, unit_name: str, rules_path: str, rules: OperationMeta, unit: OperationMeta
) -> None:
    """``unit_name`` enabled and running; ``rules`` (the rules file's operation) reloaded
    when it changed and the unit ran before this run, ``unit`` changed: systemd reloaded."""
    # did_change is only known while the run executes: it gates operations (_if), never an
    # argument. A unit started by this run loads the current rules already.
    was_running = read_once(host, SystemdStatus, services=[unit_name]).get(unit_name, False)
    systemd.daemon_reload(name="Reload systemd's units", _if=unit.did_change)
    systemd.service(name=f"Load the {what}", service=unit_name, running=True, enabled=True)
    if was_running:
        # nft itself, not `systemctl reload`: the same atomic replace of the one table (the
        # unit's ExecReload), with nft's own message when the rules are refused.
        server.shell(
            name="Load the changed rules",
            commands=[f"nft -f {shlex.quote(rules_path)}"],
            _if=rules.did_change,
        )


def table_removed(
    what: str, table: str, unit_name: str, unit_path: str, files_by_name: dict[str, str]
) -> None:
    """The unit stopped (its ExecStop deletes the table) and disabled, the table deleted if
    still there, then its unit file and ``files_by_name`` (operation name -> path) removed.
    One fact read where none is left."""
    paths = [unit_path, *files_by_name.values()]
    if not read_once(host, UnitLeftovers, unit=unit_name, paths=paths):
        host.noop(f"no {what} ({unit_name}, its files)")
        return
    systemd.service(name=f"Unload the {what}", service=unit_name, running=False, enabled=False)
    # A unit that was not active (failed, or stopped by hand) deletes nothing when stopped,
    # and once its files are gone nothing would find the table again.
    family_table = f"inet {shlex.quote(table)}"
    server.shell(
        name=f"Delete the {what}'s table if still loaded",
        commands=[
            f"if nft list table {family_table} >/dev/null 2>&1; then "
            f"nft delete table {family_table}; fi"
        ],
    )
    unit = files.file(name=f"Remove the {what}'s unit", path=unit_path, present=False)
    for name, path in files_by_name.items():
        files.file(name=name, path=path, present=False)
    systemd.daemon_reload(name=f"Forget the {what}'s unit", _if=unit.did_change)
