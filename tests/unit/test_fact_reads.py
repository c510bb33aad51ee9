"""checks.facts.read_once in a real pyinfra run (API mode, @local connector): a fact is read
once a run while the host is unchanged, by every operation and at planning and execution
alike; after an operation of the host executed commands, it is read again, as pyinfra alone
would."""

from __future__ import annotations

from unittest.mock import patch

from pyinfra import host
from pyinfra.api import Config, FactBase, Inventory, State, operation
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops

from checks.facts import UnitLeftovers, read_once


class Marker(FactBase):
    """A fact whose reads the tests count."""

    def command(self) -> str:
        return "echo marker"

    def process(self, output) -> str:
        return output[0]


@operation()
def reads_marker(change: bool = False):
    value = read_once(host, Marker)
    if change:
        yield f"true {value}"
    else:
        host.noop(f"read {value}")


def run(*ops: dict, check_for_changes: bool = True) -> tuple[list[bool], list]:
    """Plan and execute ``reads_marker`` once per entry of ``ops`` (its keyword arguments)
    on localhost; returns each read of the Marker fact from the host (True: while
    executing) and each operation's result meta. ``check_for_changes=False``: as
    ``pyinfra -y``, operations' bodies run only when they execute."""
    state = State(
        inventory=Inventory((["@local"], {})),
        config=Config(),
        check_for_changes=check_for_changes,
    )
    connect_all(state)
    local = state.inventory.get_host("@local")
    reads = []
    real = local.get_fact

    def counting(cls, *args, **kwargs):
        if cls is Marker:
            reads.append(state.is_executing)
        return real(cls, *args, **kwargs)

    try:
        with patch.object(local, "get_fact", side_effect=counting):
            metas = [add_op(state, reads_marker, **op)[local] for op in ops]
            run_ops(state)
    finally:
        disconnect_all(state)
    return reads, metas


def test_unchanged_host_reads_a_fact_once_a_run():
    reads, metas = run({"name": "a"}, {"name": "b"})
    # Planned once (the second operation reuses it); executing reuses it too.
    assert reads == [False]
    assert [meta.did_change() for meta in metas] == [False, False]


def test_after_a_change_the_host_is_read_again():
    reads, metas = run({"name": "a", "change": True}, {"name": "b"})
    # The first operation executes on what planning read; the second, after it changed the
    # host, reads again at execution.
    assert reads == [False, True]
    assert [meta.did_change() for meta in metas] == [True, False]


def test_without_change_detection_the_first_operation_reads_for_the_rest():
    reads, metas = run({"name": "a"}, {"name": "b"}, check_for_changes=False)
    assert reads == [True]
    assert [meta.did_change() for meta in metas] == [False, False]


def test_unit_leftovers_lists_what_exists(tmp_path):
    present = tmp_path / "rules.nft"
    present.write_text("table")
    state = State(inventory=Inventory((["@local"], {})), config=Config())
    connect_all(state)
    try:
        local = state.inventory.get_host("@local")
        found = local.get_fact(
            UnitLeftovers,
            unit="pyinfra-sglang-no-such.service",
            paths=[str(present), str(tmp_path / "gone.conf")],
        )
    finally:
        disconnect_all(state)
    # No such unit: neither enabled nor active; of the paths, the one that exists.
    assert found == [str(present)]
