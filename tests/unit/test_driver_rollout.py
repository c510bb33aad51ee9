"""Rolling driver upgrades without hosts: the budget, the validation gate, the record, and
the run's gate that lets hosts out of service a few at a time (pyinfra_sglang/driver/
rollout.py, roles/driver_rollout.py FleetRollout)."""

from __future__ import annotations

import json

import gevent
import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File

from checks.facts import (
    NvidiaLoadedModule,
    StateFile,
    SystemdUnitState,
    Virtualization,
)
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.rollout_gate import validation_problems
from pyinfra_sglang.driver.rollout import (
    FAILED,
    OUT,
    RolloutRecord,
    read_record,
    unavailable_budget,
)
from pyinfra_sglang.inventory import HostConfig
from roles.driver_rollout import FleetRollout, RolloutNeed, rollout_need
from roles.nvidia_driver import RolloutNeedsReboot, rollout_reboot_commands
from tests.unit.greenlets import join_all
from tests.unit.ophelper import run_operation


@pytest.mark.parametrize(
    ("value", "fleet", "budget"),
    [(1, 16, 1), (3, 2, 3), ("25%", 4, 1), ("25%", 5, 2), ("25%", 16, 4), ("1%", 3, 1)],
)
def test_budget_a_count_or_a_percentage_rounded_up(value, fleet, budget):
    assert unavailable_budget(value, fleet) == budget


@pytest.mark.parametrize("bad", [0, -1, True, "0%", "101%", "25 %", "x", 2.5, "1.5", "", "no"])
def test_a_budget_that_is_no_count_nor_percentage_is_refused(bad):
    with pytest.raises(ValueError, match="driver_rollout_max_unavailable"):
        HostConfig(driver_rollout_max_unavailable=bad)


def ok(code: str) -> Finding:
    return Finding("ok", code, "fine")


PASSING = [ok("driver"), ok("service"), ok("decode-sanity"), ok("gpu-health")]


def test_a_host_that_passed_every_check_may_rejoin():
    assert validation_problems(PASSING, serving=True) == []


def test_a_failed_gate_check_or_a_module_not_loaded_keeps_it_out():
    findings = [
        *PASSING,
        Finding("fail", "driver-drift", "590.48.01 is loaded, branch 595 pinned"),
        Finding("warn", "driver-reboot-required", "595.58.03 installed, 590.48.01 loaded"),
        Finding("warn", "pcie-gen-below-max", "a link warning is no gate"),
        Finding("fail", "sglang-version-drift", "not the driver's business"),
    ]
    assert validation_problems(findings, serving=True) == [
        "driver-drift: 590.48.01 is loaded, branch 595 pinned",
        "driver-reboot-required: 595.58.03 installed, 590.48.01 loaded",
    ]


def test_a_check_never_read_as_ok_keeps_it_out():
    # No decode answer read (the audit could not ask): no ok, so no rejoin.
    findings = [ok("driver"), ok("service")]
    assert validation_problems(findings, serving=True) == ["decode-sanity: not read as ok"]
    assert validation_problems(findings, serving=False) == []
    assert validation_problems([], serving=False) == ["driver: not read as ok"]


def test_the_record_round_trips_and_a_foreign_one_is_not_read():
    url = "http://10.0.0.2:30000/"
    record = RolloutRecord(FAILED, "driver branch 595", "router-host", url, "x")
    assert read_record(json.loads(record.text())) == record
    assert read_record({"phase": OUT, "target": "t"}) == RolloutRecord(OUT, "t", None, None)
    for foreign in (None, [], {"phase": "done"}, {"phase": OUT, "router": 3}):
        assert read_record(foreign) is None


def run_hosts(fleet: FleetRollout, names: list[str], hold_s: float = 0.05, fail: str = "") -> dict:
    """Each host takes its turn in a greenlet, holds it a moment, and is done (or fails)."""
    outcome: dict[str, str] = {}

    def one(name: str) -> None:
        try:
            fleet.take_turn(name)
        except OperationError as error:
            outcome[name] = str(error)
            return
        gevent.sleep(hold_s)
        if name == fail:
            fleet.fail(name, "validation failed")
            outcome[name] = "failed"
            return
        fleet.done(name)
        outcome[name] = "done"

    join_all([gevent.spawn(one, name) for name in names])
    return outcome


def test_hosts_go_out_at_most_the_budget_at_once():
    fleet = FleetRollout()
    names = [f"h{i}" for i in range(6)]
    for name in names:
        fleet.register(name, 2, already_out=False, operator_out=False)
    assert run_hosts(fleet, names) == dict.fromkeys(names, "done")
    assert fleet.most_out == 2 and not fleet.out


def test_the_strictest_budget_of_the_run_holds():
    fleet = FleetRollout()
    fleet.register("a", 3, already_out=False, operator_out=False)
    fleet.register("b", 1, already_out=False, operator_out=False)
    fleet.register("c", 3, already_out=False, operator_out=False)
    run_hosts(fleet, ["a", "b", "c"])
    assert fleet.most_out == 1


def test_a_failed_host_stops_the_hosts_not_yet_started():
    fleet = FleetRollout()
    names = ["h0", "h1", "h2", "h3"]
    for name in names:
        fleet.register(name, 1, already_out=False, operator_out=False)
    outcome = run_hosts(fleet, names, fail="h0")
    assert outcome["h0"] == "failed"
    for name in names[1:]:
        assert outcome[name].startswith("not changed: the driver rollout stopped at h0"), outcome
    assert fleet.out == {"h0"}  # it stays out


def test_a_host_a_rollout_left_out_goes_first_and_counts():
    fleet = FleetRollout()
    fleet.register("resumed", 1, already_out=True, operator_out=False)
    fleet.register("fresh", 1, already_out=False, operator_out=False)
    order = []

    def fresh():
        fleet.take_turn("fresh")
        order.append("fresh")
        fleet.done("fresh")

    def resumed():
        gevent.sleep(0.1)  # registered out: the fresh host waits even while it is slower
        fleet.take_turn("resumed")
        order.append("resumed")
        gevent.sleep(0.05)
        fleet.done("resumed")

    join_all([gevent.spawn(fresh), gevent.spawn(resumed)])
    assert order == ["resumed", "fresh"] and fleet.most_out == 1


def test_operator_out_hosts_take_no_turn_stay_out_and_count():
    fleet = FleetRollout()
    fleet.register("kept-out", 2, already_out=False, operator_out=True)
    for name in ("a", "b"):
        fleet.register(name, 2, already_out=False, operator_out=False)
    outcome = run_hosts(fleet, ["kept-out", "a", "b"])
    assert outcome == {"kept-out": "done", "a": "done", "b": "done"}
    assert fleet.out == {"kept-out"} and fleet.most_out == 2

    full = FleetRollout()
    full.register("kept-out", 1, already_out=False, operator_out=True)
    full.register("a", 1, already_out=False, operator_out=False)
    [message] = run_hosts(full, ["a"]).values()
    assert "1 host(s) out of service already (kept-out)" in message, message
    assert "driver_rollout_max_unavailable allows 1" in message


def test_turns_follow_the_inventory_order_whoever_asks_first():
    fleet = FleetRollout()
    names = ["h0", "h1", "h2", "h3"]
    for position, name in reversed(list(enumerate(names))):  # planned last to first
        fleet.register(name, 2, already_out=False, operator_out=False, position=position)
    started = []

    def one(name: str, delay: float) -> None:
        gevent.sleep(delay)
        fleet.take_turn(name)
        started.append(name)
        gevent.sleep(0.5)  # past the gate's next look: the second of the batch joins it
        fleet.done(name)

    # h3 asks first, h0 last: h0 and h1 still go first, two at a time.
    delays = {"h3": 0, "h2": 0.01, "h1": 0.02, "h0": 0.03}
    join_all([gevent.spawn(one, name, delay) for name, delay in delays.items()])
    assert started == names and fleet.most_out == 2


def test_a_host_gone_from_the_run_gives_its_place_up():
    fleet = FleetRollout()
    for name in ("lost", "next"):
        fleet.register(name, 1, already_out=False, operator_out=False)
    # "lost" failed an earlier operation and never asks for its turn.
    with gevent.Timeout(5):
        fleet.take_turn("next", gone=lambda name: name == "lost")
    assert fleet.out == {"next"}


# --- what a host's facts decide at planning ------------------------------------------------


class Planned:
    """run_operation drives a generator: this one calls ``check`` and keeps its answer."""

    answer = None

    @classmethod
    def _inner(cls, check, **kwargs):
        cls.answer = check(**kwargs)
        return []


def planned(check, facts: dict, **kwargs):
    run_operation(Planned, facts, check=check, **kwargs)
    return Planned.answer


def need_facts(record=None, present=False, serving=True, marked=False) -> dict:
    return {
        StateFile: {"present": present or record is not None, "record": record},
        File: {"mode": 644} if marked else None,
        SystemdUnitState: {"ActiveState": "active" if serving else "inactive"},
    }


RECORD = {"phase": "failed", "target": "driver branch 595", "problem": "driver-drift: x"}


@pytest.mark.parametrize(
    ("changing", "facts", "rolls", "operator_out"),
    [
        (True, need_facts(), True, None),
        (True, need_facts(serving=False), False, None),  # a first deploy: side by side
        (False, need_facts(), False, None),  # nothing to change
        (False, need_facts(record=RECORD), True, None),  # resumes: validate, rejoin
        (False, need_facts(record=RECORD, marked=True), False, "on the host"),  # left alone
        (True, need_facts(serving=False, marked=True), True, "on the host"),  # no turn taken
        (False, need_facts(present=True), True, None),  # a record it cannot read: out
    ],
)
def test_which_hosts_take_a_turn(changing, facts, rolls, operator_out, monkeypatch):
    import roles.driver_rollout as rollout

    rolling = HostConfig(driver_rollout_max_unavailable=1)
    monkeypatch.setattr(rollout, "host_config", lambda host: rolling)
    need = planned(rollout_need, facts, changing=changing)
    assert need.rolls is rolls
    assert (need.operator_out is None) is (operator_out is None), need
    if operator_out:
        assert operator_out in need.operator_out
    if facts[StateFile]["record"]:
        assert need.record.problem == "driver-drift: x"
    assert need.record_unreadable is (
        facts[StateFile]["present"] and not facts[StateFile]["record"]
    )


def test_a_multi_node_member_takes_no_turn(monkeypatch):
    import roles.driver_rollout as rollout

    monkeypatch.setattr(
        rollout, "host_config", lambda host: HostConfig(sglang_multinode_group="pair")
    )
    # Reads nothing: no fact is given.
    assert planned(rollout_need, {}, changing=True) == RolloutNeed(False, None, None)


def reboot_facts(container: str | None) -> dict:
    return {
        NvidiaLoadedModule: {"version": "590.48.01", "flavor": "open"},
        DebPackages: {"nvidia-kernel-open-dkms": ["595.58.03-1"]},
        Virtualization: {"container": container, "vm": None},
    }


def test_a_turn_reboots_where_the_kernel_must_load_the_module_and_is_refused_without_leave():
    modules = ("nvidia-kernel-open-dkms",)
    allowed = HostConfig(allow_reboot=True)
    commands = planned(
        rollout_reboot_commands, reboot_facts(None), config=allowed, module_packages=modules
    )
    assert [type(c).__name__ for c in commands] == ["StringCommand", "FunctionCommand"]
    assert "systemctl reboot" in str(commands[0])
    in_container = planned(
        rollout_reboot_commands,
        reboot_facts("systemd-nspawn"),
        config=HostConfig(),
        module_packages=modules,
    )
    assert in_container == []  # the outer host loads the module
    with pytest.raises(RolloutNeedsReboot) as refused:
        planned(
            rollout_reboot_commands,
            reboot_facts(None),
            config=HostConfig(),
            module_packages=modules,
        )
    assert str(refused.value).startswith("host op-test-host: its driver changes while it serves")
    assert "allow_reboot = false" in str(refused.value)
    assert str(refused.value).endswith("Nothing was changed.")


def test_by_default_one_host_at_a_time_and_off_changes_them_together(monkeypatch):
    import roles.driver_rollout as rollout

    # The GPU Operator's default, one node at a time (maxParallelUpgrades: 1).
    assert HostConfig().driver_rollout_max_unavailable == 1
    monkeypatch.setattr(rollout, "host_config", lambda host: HostConfig())
    assert planned(rollout_need, need_facts(), changing=True).rolls
    # "off" (any case) or None: no turns; a record a rollout left is resumed all the same.
    for off in ("off", "OFF", " off ", None):
        config = HostConfig(driver_rollout_max_unavailable=off)
        assert config.driver_rollout_max_unavailable is None
        monkeypatch.setattr(rollout, "host_config", lambda host, config=config: config)
        assert not planned(rollout_need, need_facts(), changing=True).rolls
        assert planned(rollout_need, need_facts(record=RECORD), changing=False).rolls
