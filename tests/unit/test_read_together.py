"""checks.facts.read_together on pyinfra's @local host: facts of one concern, declared
together, are read in one command when read_once first reads one of them; each gets the
value it has read alone (its process(), its default for no output or a missing program),
and read_once then reads none of them again; a member whose command fails is left for
read_once to read alone."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.server import Which

from checks.facts import Facts, FileStates, FirstLine, NvidiaGpus, read_once, read_together


class Exits(FactBase):
    """A command that leaves its shell: only its own subshell ends."""

    def command(self) -> str:
        return "echo before; exit 0"

    def process(self, output) -> list[str]:
        return list(output)


class Fails(FactBase):
    def command(self) -> str:
        return "echo partial; false"

    def process(self, output) -> list[str]:
        return list(output)


@pytest.fixture
def local(tmp_path):
    # No nvidia-smi on this PATH: NvidiaGpus' requires_command answers with its default.
    state = State(
        inventory=Inventory((["@local"], {})), config=Config(ENV={"PATH": "/usr/bin:/bin"})
    )
    connect_all(state)
    yield state.inventory.get_host("@local")
    disconnect_all(state)


def test_facts_read_together_are_what_each_reads_alone(local, tmp_path):
    ref = tmp_path / "ref"
    ref.write_text("abc123\nmore\n")
    members = [
        (FirstLine, {"path": str(ref)}),
        (FirstLine, {"path": str(tmp_path / "missing")}),
        (FileStates, {"paths": (str(ref),)}),
        (NvidiaGpus, {}),
        (Which, {"command": "sh"}),
        (Exits, {}),
    ]
    alone = [local.get_fact(cls, **kwargs) for cls, kwargs in members]
    reads = []
    real = local.get_fact

    def counting(cls, *args, **kwargs):
        reads.append(cls)
        return real(cls, *args, **kwargs)

    with patch.object(local, "get_fact", side_effect=counting):
        read_together(local, *members)
        assert reads == []  # declared: read when first needed
        together = [read_once(local, cls, **kwargs) for cls, kwargs in members]
    assert reads == [Facts]
    assert together == alone
    assert together[0] == "abc123" and together[1] is None and together[3] == []
    assert together[5] == ["before"]


def test_a_failed_member_is_read_alone(local):
    reads = []
    real = local.get_fact

    def counting(cls, *args, **kwargs):
        reads.append(cls)
        return real(cls, *args, **kwargs)

    with patch.object(local, "get_fact", side_effect=counting):
        read_together(local, (Fails, {}), (Which, {"command": "sh"}))
        read_once(local, Which, command="sh")
        with pytest.raises(PyinfraError):  # read alone, it fails the host, as it would have
            read_once(local, Fails)
    # Which came from the shared read; Fails is read on its own.
    assert reads == [Facts, Fails]


def test_known_facts_are_not_read_again(local):
    read_once(local, Which, command="sh")
    reads = []
    real = local.get_fact
    with patch.object(
        local, "get_fact", side_effect=lambda cls, **kw: reads.append(cls) or real(cls, **kw)
    ):
        # One left to read: read_once reads it alone, under its own name.
        read_together(local, (Which, {"command": "sh"}), (Exits, {}))
        read_once(local, Exits)
    assert reads == [Exits]
