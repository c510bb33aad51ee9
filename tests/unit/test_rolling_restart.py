"""Rolling restarts and rollbacks: which router a server stands behind (from the inventory
alone), the turns servers behind one router take, which units an apply restarts, what a
rollback puts back, and a multi-node group that comes up or rolls back as one."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from pyinfra.api import Inventory
from pyinfra.api.exceptions import ConnectError, OperationError

import roles.service_apply as engine
from checks.facts import Virtualenvs
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig, host_profile, rolling_group
from pyinfra_sglang.serving.placement import GpuSet, NodePosition, place
from pyinfra_sglang.serving.render import Secrets
from pyinfra_sglang.serving.service_files import ServiceFiles, rank0_stops_first, service_files_for
from roles.service_apply import (
    ApplyPlan,
    coordinator,
    keep_command,
    plan_apply,
    restart_rank0_first,
    restore_command,
)
from roles.sglang_service import units_to_restart, venvs_to_remove
from tests.unit.greenlets import join_all

WORKERS = ["http://10.0.0.1:30000", "http://gpu-b:30000", "http://10.0.0.4:31000"]


def inventory() -> Inventory:
    return Inventory(
        (
            [
                ("gpu-a", {"ssh_hostname": "10.0.0.1", "sglang_router_worker_urls": WORKERS}),
                ("gpu-b", {}),
                ("gpu-c", {"ssh_hostname": "10.0.0.3"}),  # serves, behind no router
                ("gpu-d", {"ssh_hostname": "10.0.0.4"}),  # listed, but at another port
            ],
            {"sglang_model_profile": "dense-bf16"},
        )
    )


def test_a_server_stands_behind_the_router_whose_worker_urls_name_it():
    hosts = inventory()
    groups = {h.name: rolling_group(h) for h in hosts}
    assert groups == {
        "gpu-a": "router gpu-a",  # by its ssh_hostname
        "gpu-b": "router gpu-a",  # by its name
        "gpu-c": None,
        "gpu-d": None,  # the URL's port is not its sglang_port
    }


def service(group: str | None, batch: int = 1) -> ServiceFiles:
    return ServiceFiles("sglang.service", (), None, 60, rolling_group=group, rolling_batch=batch)


class Run:
    """Stands for a run's pyinfra State: the turns are per run."""


def plan(service: ServiceFiles) -> ApplyPlan:
    return plan_apply(service, keep_previous=True, restart=(), owners={})


def turns(batch: int, fail_first: bool = False) -> tuple[list[str], dict]:
    """Three hosts behind one router, each holding its turn for a moment."""
    events: list[str] = []
    outcome: dict = {}
    state = Run()

    def apply(name: str, fail: bool):
        host = SimpleNamespace(name=name, print_prefix=f"[{name}] ")
        try:
            with coordinator(state).rolling_turn(host, plan(service("router r", batch))):
                events.append(f"start {name}")
                gevent.sleep(0.05)
                if fail:
                    raise OperationError("did not come up")
                events.append(f"end {name}")
            outcome[name] = "ok"
        except OperationError as error:
            outcome[name] = str(error)

    greenlets = [gevent.spawn(apply, f"h{i}", fail_first and i == 0) for i in range(3)]
    join_all(greenlets, timeout=10)
    return events, outcome


def test_servers_behind_a_router_take_turns_one_at_a_time():
    events, outcome = turns(batch=1)
    assert events == ["start h0", "end h0", "start h1", "end h1", "start h2", "end h2"]
    assert set(outcome.values()) == {"ok"}


def test_a_batch_of_two_restarts_two_at_a_time():
    events, _ = turns(batch=2)
    assert events[:2] == ["start h0", "start h1"] and events[2:4] == ["end h0", "end h1"]


def test_after_a_failed_turn_the_others_keep_their_running_version():
    events, outcome = turns(batch=1, fail_first=True)
    assert events == ["start h0"]
    assert outcome["h0"] == "did not come up"
    for name in ("h1", "h2"):
        assert "failed on h0 first; this host keeps serving its running version" in outcome[name]


def test_servers_behind_no_router_do_not_wait():
    events: list[str] = []

    def apply(name):
        host = SimpleNamespace(name=name, print_prefix="")
        with coordinator(Run()).rolling_turn(host, plan(service(None))):
            events.append(f"start {name}")
            gevent.sleep(0.05)
            events.append(f"end {name}")

    join_all([gevent.spawn(apply, n) for n in ("a", "b")], timeout=10)
    assert events[:2] == ["start a", "start b"]


def digests(files) -> dict[str, str]:
    return {f.path: hashlib.sha256(f.content.encode()).hexdigest() for f in files}


ROUTED = HostConfig(sglang_model_profile="dense-bf16", sglang_router_worker_urls=WORKERS[:2])
UNIT = "sglang.service"
ACTIVE = {UNIT: True, "sglang-router.service": True}


def rendered(config: HostConfig) -> ServiceFiles:
    gpus = GpuSet(2, 141, "sm_90")
    placement = place(host_profile(config), gpus, NodePosition(), config.sglang_version)
    return service_files_for(config, placement, Secrets())


@pytest.mark.parametrize(
    ("change", "active", "healthy", "restart"),
    [
        # A profile change: the server restarts, its router stays up for the others.
        (
            {"sglang_profile_overrides": {"mem_fraction_static": 0.8}},
            ACTIVE,
            True,
            ["sglang.service"],
        ),
        # A router change (another worker list): the router alone.
        ({"sglang_router_worker_urls": WORKERS}, ACTIVE, True, ["sglang-router.service"]),
        # Nothing changed but a stopped router, or an unhealthy server.
        ({}, {"sglang.service": True}, True, ["sglang-router.service"]),
        ({}, ACTIVE, False, ["sglang.service"]),
    ],
)
def test_an_apply_restarts_only_the_units_that_need_it(change, active, healthy, restart):
    on_host = digests(rendered(ROUTED).files)
    service = rendered(ROUTED.model_copy(update=change))
    assert list(units_to_restart(service, on_host, active, lambda: healthy)) == restart


# --- rollback: what is kept and put back --------------------------------------------------


def sh(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True)


def test_a_kept_file_from_an_interrupted_run_is_not_overwritten(tmp_path):
    unit = tmp_path / "sglang.service"
    unit.write_text("the version that ran\n")
    sh(keep_command(str(unit)))
    unit.write_text("half-applied by a run that was interrupted\n")
    sh(keep_command(str(unit)))  # the next run keeps again
    sh(restore_command(str(unit)))
    assert unit.read_text() == "the version that ran\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang.service"]


def test_a_file_that_did_not_exist_is_removed_again(tmp_path):
    env = tmp_path / "sglang-router.env"
    sh(keep_command(str(env)))
    env.write_text("new\n")
    sh(restore_command(str(env)))
    assert list(tmp_path.iterdir()) == []


def members_apply(outcomes: dict[str, str | None]) -> dict[str, str | None]:
    """Every member of one multi-node group ends its start with its own problem (None:
    healthy); what each member then concludes."""
    run = Run()
    group = ServiceFiles("sglang.service", (), None, 5, multinode_group="pair")
    for name in outcomes:
        coordinator(run).group(group.multinode_group).members.add(name)
    verdicts: dict[str, str | None] = {}

    def member(name: str):
        gevent.sleep(0.01 * len(verdicts))
        host = SimpleNamespace(name=name, print_prefix="")
        verdicts[name] = coordinator(run).group_outcome(host, plan(group), outcomes[name])

    join_all([gevent.spawn(member, n) for n in outcomes], timeout=10)
    return verdicts


def test_a_multinode_group_comes_up_together_or_rolls_back_as_one():
    assert members_apply({"rank0": None, "rank1": None}) == {"rank0": None, "rank1": None}
    verdicts = members_apply({"rank0": "health not 200 after 1200 s", "rank1": None})
    assert verdicts["rank0"] == "health not 200 after 1200 s"
    assert verdicts["rank1"] == (
        "group pair rolls back as one: rank0 did not come up (health not 200 after 1200 s)"
    )


# --- the stop order of a multi-node group ---------------------------------------------------


def test_rank0_stops_first_from_sglang_0_5_21():
    # sglang/srt/entrypoints/engine.py: 0.5.21 adds the non-zero ranks' SIGTERM handler.
    assert not rank0_stops_first("0.5.20")
    assert rank0_stops_first("0.5.21") and rank0_stops_first("0.5.23")
    # The SGLang stand-in's copy of the boundary (it runs on test hosts without the project).
    releases = (
        Path(__file__).parents[1] / "hosts/standins/sglang/sglang/_standin/releases.py"
    ).read_text()
    boundary = data.sglang_service().multinode.rank0_stops_first_from
    assert f'NONZERO_RANK_WAITS_FOR_RANK0 = "{boundary}"' in releases


class GroupRun(Run):
    def __init__(self, names: list[str]):
        self.hosts = {
            n: SimpleNamespace(name=n, print_prefix=f"[{n}] ", connected=True) for n in names
        }
        self.inventory = SimpleNamespace(get_host=self.hosts.__getitem__)


def group_restart(
    monkeypatch, applying: list[str], rank0_fails: bool = False, unreachable: str | None = None
):
    """A group of three (rank0, rank1, rank2) where ``applying`` apply in this run; each
    command takes a moment, a stop of rank 0 longest (it drains). The commands in the order
    they finished, and what each applying member's restart returned (or raised)."""
    names = ["rank0", "rank1", "rank2"]
    run = GroupRun(names)
    events: list[str] = []

    def command(host_, text: str, **_) -> tuple[bool, str]:
        gevent.sleep(0.2 if text.startswith("systemctl stop") and host_.name == "rank0" else 0.02)
        events.append(f"{host_.name}: {text.replace(' 2>/dev/null', '')}")
        return True, ""

    if unreachable:
        # Left out of the run (--limit) and not reachable now.
        def refuse(**_):
            raise ConnectError("Could not connect (timed out)")

        run.hosts[unreachable].connected = False
        run.hosts[unreachable].connect = refuse
    monkeypatch.setattr(engine, "_run", command)
    monkeypatch.setattr(engine, "run_on_host", command)
    outcome: dict = {}

    def member(name: str):
        service = ServiceFiles(
            "sglang.service",
            (),
            None,
            5,
            multinode_group="trio",
            node_rank=names.index(name),
            group_hosts=tuple(names),
            rank0_first=True,
        )
        if rank0_fails and name == "rank0":
            coordinator(run).group("trio").rank0_failed("install failed")
            outcome[name] = "failed"
            return
        try:
            driven = restart_rank0_first(
                coordinator(run), run, run.hosts[name], plan(service), "sglang.service"
            )
            outcome[name] = driven.name if driven else None
        except OperationError as error:
            outcome[name] = str(error)

    for name in applying:  # registered while pyinfra checks for changes, as the role does
        coordinator(run).group("trio").members.add(name)
    # Workers first, so a wrong order would show.
    join_all([gevent.spawn(member, n) for n in reversed(applying)], timeout=10)
    return events, outcome


def test_every_member_applies_rank0_stops_before_the_others_restart(monkeypatch):
    events, outcome = group_restart(monkeypatch, ["rank0", "rank1", "rank2"])
    assert events[0] == "rank0: systemctl stop sglang.service"
    assert sorted(events[1:]) == [f"rank{n}: systemctl restart sglang.service" for n in (0, 1, 2)]
    assert outcome == {"rank0": None, "rank1": None, "rank2": None}


def test_a_worker_alone_restarts_its_group_rank0_first(monkeypatch):
    # Only rank 1's files changed: rank 1 (the lowest-ranked member applying) drives the
    # others, rank 0 stopped first, and waits for rank 0's health.
    events, outcome = group_restart(monkeypatch, ["rank1"])
    assert events == [
        "rank0: systemctl stop sglang.service",
        "rank2: systemctl stop sglang.service",
        "rank1: systemctl restart sglang.service",
        "rank0: systemctl reset-failed sglang.service; systemctl start sglang.service",
        "rank2: systemctl reset-failed sglang.service; systemctl start sglang.service",
    ]
    assert outcome == {"rank1": "rank0"}


def test_rank0_alone_starts_the_ranks_its_broadcast_stopped(monkeypatch):
    events, outcome = group_restart(monkeypatch, ["rank0"])
    assert events[:2] == [
        "rank0: systemctl stop sglang.service",
        "rank1: systemctl stop sglang.service",
    ]
    assert events[3] == "rank0: systemctl restart sglang.service"
    assert outcome == {"rank0": None}


def test_a_rank0_that_fails_before_its_stop_leaves_the_others_running(monkeypatch):
    events, outcome = group_restart(monkeypatch, ["rank0", "rank1"], rank0_fails=True)
    assert events == []
    assert outcome["rank1"].startswith("not restarted: rank 0 of group trio did not stop")


def test_with_y_a_member_waits_until_the_others_decided_whether_they_apply():
    """pyinfra -y checks nothing ahead: the members decide as they run, side by side; the
    group's apply starts once all did (and not forever for one that never does)."""
    run = Run()
    group = coordinator(run).group("p")
    group.decide("rank1", applies=True)

    def rank0_later():
        gevent.sleep(0.2)
        group.decide("rank0", applies=False)

    gevent.spawn(rank0_later)
    started = time.monotonic()
    group.wait_decided({"rank0", "rank1"}, timeout_s=5)
    assert 0.15 < time.monotonic() - started < 2
    assert group.members == {"rank1"} and group.decided == {"rank0", "rank1"}
    started = time.monotonic()
    group.wait_decided({"rank0", "rank1", "rank2"}, timeout_s=0.3)
    assert time.monotonic() - started < 1


def test_a_group_member_out_of_reach_leaves_the_group_running(monkeypatch):
    events, outcome = group_restart(monkeypatch, ["rank1"], unreachable="rank0")
    assert events == []
    assert outcome["rank1"].startswith(
        "not restarted: group trio restarts as one and rank0 cannot be reached"
    )


# --- one venv per release -----------------------------------------------------------------


def test_each_release_combination_has_its_own_venv():
    assert HostConfig().venv_path == "/opt/sglang/venvs/0.5.23-py3.12-cu13.1"
    assert (
        HostConfig(sglang_version="0.5.22", python_version="3.11").venv_path
        == "/opt/sglang/venvs/0.5.22-py3.11-cu13.1"
    )
    assert HostConfig(venv_path="/srv/venv").venv_path == "/srv/venv"  # set: kept as set


def test_venvs_beyond_the_newest_two_go_but_never_the_running_one():
    present = ["/v/c", "/v/b", "/v/a"]  # newest first
    assert venvs_to_remove(present, "/v/c", keep=2) == ["/v/a"]
    # Back on an older release: it and the newest other stay.
    assert venvs_to_remove(present, "/v/a", keep=2) == ["/v/b"]
    assert venvs_to_remove(["/v/a"], "/v/a", keep=2) == []


def test_the_venv_fact_reads_newest_first_and_skips_what_is_no_venv():
    output = [
        "1764600000 /opt/sglang/venvs/0.5.23-py3.12-cu13.1//pyvenv.cfg",
        "1764500000 /opt/sglang/venvs/0.5.22-py3.12-cu13.1//pyvenv.cfg",
        "stat: cannot statx '/opt/sglang/venvs/x//pyvenv.cfg': No such file or directory",
    ]
    assert Virtualenvs().process(output) == [
        "/opt/sglang/venvs/0.5.23-py3.12-cu13.1",
        "/opt/sglang/venvs/0.5.22-py3.12-cu13.1",
    ]
