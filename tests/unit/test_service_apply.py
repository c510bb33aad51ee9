"""The apply engine (roles/service_apply.py) driven on a scripted host: the engine's real
shell commands run here on files under tmp_path, with systemctl, journalctl and curl
replaced by scripts that record their arguments and answer from the config file installed
(``crash`` in it: the server exits at start; ``hang``: it runs but /health never says 200).
What is asserted is what a host would end with: which files, which kept copies, which
systemctl calls in which order, how the run ends."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from pyinfra import state
from pyinfra.api import Inventory
from pyinfra.context import ctx_state
from pyinfra.facts.systemd import SystemdStatus

import roles.service_apply as engine
import roles.sglang_service as role
from checks.facts import (
    FileDigests,
    IommuState,
    NvidiaGpus,
    NvidiaP2P,
    NvidiaTopology,
    PcieAcs,
    Virtualization,
)
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.serving.render import RenderedFile
from pyinfra_sglang.serving.service_files import ServiceFiles
from roles.service_apply import ApplyPlan, HealthCheck, apply_with_rollback, coordinator, plan_apply
from tests.unit.captures import captured_lines
from tests.unit.greenlets import join_all
from tests.unit.ophelper import run_operation

HEALTH = "http://127.0.0.1:30000/health"
OWNER = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"

SYSTEMCTL = r"""#!/bin/bash
echo "$*" >> "$FAKE/systemctl.log"
if [ "$1" = show ]; then
  if grep -q crash "$CONFIG" 2>/dev/null; then
    printf 'ActiveState=activating\nSubState=auto-restart\nExecMainStatus=1\nNRestarts=1\n'
  else
    printf 'ActiveState=active\nSubState=running\nExecMainStatus=0\nNRestarts=0\n'
  fi
fi
"""
CURL = r"""#!/bin/bash
if grep -q hang "$CONFIG" 2>/dev/null; then printf 503; else printf 200; fi
"""
JOURNALCTL = r"""#!/bin/bash
echo "RuntimeError: Failed to load model ($(cat "$CONFIG"))"
"""


class ScriptedHost:
    """A pyinfra host whose commands run here, in bash, with the fake systemctl, curl and
    journalctl first on PATH; every command recorded."""

    current_op_global_arguments: dict = {}
    connected = True

    def __init__(self, root: Path, name: str = "gpu-1"):
        self.name = name
        self.print_prefix = f"[{name}] "
        self.inventory = Inventory(([name], {}))  # the journal is masked with its secrets
        self.root = root
        self.etc = root / "etc"
        self.etc.mkdir(parents=True)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for program, text in (("systemctl", SYSTEMCTL), ("curl", CURL), ("journalctl", JOURNALCTL)):
            (bin_dir / program).write_text(text)
            (bin_dir / program).chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE": str(root),
            "CONFIG": str(self.etc / "sglang.yaml"),
        }
        self.commands: list[str] = []

    def run_shell_command(self, command, **arguments):
        command = str(command)
        self.commands.append(command)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=self.env)
        lines = (done.stdout + done.stderr).splitlines()
        return done.returncode == 0, [SimpleNamespace(line=line) for line in lines]

    def put_file(self, file_io, remote, **arguments):
        Path(remote).write_bytes(file_io.read())
        return True

    def systemctl(self) -> list[str]:
        """systemctl's calls, the polls (show) left out."""
        log = self.root / "systemctl.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if not line.startswith("show")]

    def files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.etc.iterdir())}


def plan_for(
    host: ScriptedHost,
    config: str,
    *,
    keep_previous: bool = True,
    timeout_s: int = 5,
    stale: tuple[str, ...] = (),
    **group,
) -> ApplyPlan:
    files = (
        RenderedFile(str(host.etc / "sglang.service"), "[Service]\n", "644"),
        RenderedFile(str(host.etc / "sglang.yaml"), config, "600"),
    )
    service = ServiceFiles("sglang.service", files, HEALTH, timeout_s, stale=stale, **group)
    return plan_apply(
        service,
        keep_previous=keep_previous,
        restart=(),
        owners={f.path: OWNER for f in files},
    )


def running(host: ScriptedHost, config: str = "model: v1\n") -> None:
    """The host runs a working version."""
    (host.etc / "sglang.service").write_text("[Service]\n")
    (host.etc / "sglang.yaml").write_text(config)


class Run:
    """Stands for a run's pyinfra State."""

    def __init__(self, *hosts: ScriptedHost):
        self.inventory = SimpleNamespace(get_active_hosts=lambda: list(hosts))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(engine, "HEALTH_POLL_S", 0.05)


APPLY = ["daemon-reload", "enable sglang.service", "reset-failed sglang.service"]
RESTART = [*APPLY, "restart sglang.service"]
ROLLBACK = ["daemon-reload", "enable sglang.service", "restart sglang.service"]


def test_a_healthy_start_installs_the_files_and_forgets_the_kept_ones(tmp_path, caplog):
    host = ScriptedHost(tmp_path)
    running(host)
    with caplog.at_level("INFO"):
        assert apply_with_rollback(Run(host), host, plan_for(host, "model: v2\n")) is True
    assert host.files() == {"sglang.service": "[Service]\n", "sglang.yaml": "model: v2\n"}
    assert host.systemctl() == RESTART
    assert oct((host.etc / "sglang.yaml").stat().st_mode & 0o777) == "0o600"
    assert f"sglang.service is healthy ({HEALTH})" in caplog.text
    # Kept, then forgotten: the first command keeps, the last one forgets.
    assert host.commands[0].count("cp -p") == 2
    assert host.commands[-1].startswith("rm -f ") and ".last-good" in host.commands[-1]


def test_a_crash_on_start_puts_the_previous_files_back_and_restarts_them(tmp_path, caplog):
    host = ScriptedHost(tmp_path)
    running(host)
    with caplog.at_level("INFO"):
        ok = apply_with_rollback(Run(host), host, plan_for(host, "model: crash\n"))
    assert ok is False
    assert host.files() == {"sglang.service": "[Service]\n", "sglang.yaml": "model: v1\n"}
    assert host.systemctl() == RESTART + ROLLBACK
    assert "the new configuration did not come up (sglang.service exited " in caplog.text
    assert "Failed to load model (model: crash" in caplog.text  # the journal's tail
    assert "rolled back: the previous version is healthy again" in caplog.text


def test_a_start_that_is_not_healthy_in_time_is_rolled_back(tmp_path, caplog):
    host = ScriptedHost(tmp_path)
    running(host)
    with caplog.at_level("INFO"):
        ok = apply_with_rollback(Run(host), host, plan_for(host, "model: hang\n", timeout_s=1))
    assert ok is False
    assert f"did not come up ({HEALTH} not healthy after 1 s); rolled back" in caplog.text
    assert host.files()["sglang.yaml"] == "model: v1\n"
    assert host.systemctl() == RESTART + ROLLBACK


def test_a_first_start_that_fails_is_stopped_and_disabled(tmp_path, caplog):
    host = ScriptedHost(tmp_path)
    plan = plan_for(host, "model: crash\n", keep_previous=False)
    assert apply_with_rollback(Run(host), host, plan) is False
    assert host.systemctl() == [*RESTART, "disable --now sglang.service"]
    assert "there was no previous version to keep: sglang.service stopped and disabled" in (
        caplog.text
    )
    assert not [name for name in host.files() if name.endswith((".last-good", ".absent"))]


def test_an_interrupted_run_s_kept_files_are_what_a_rollback_puts_back(tmp_path):
    """A run interrupted after keeping left the version that ran before it as .last-good
    (and .absent for a file that did not exist) and its own files half-applied: the next
    run keeps those kept versions, not the half-applied ones."""
    host = ScriptedHost(tmp_path)
    running(host, "model: half-applied\n")
    (host.etc / "sglang.yaml.last-good").write_text("model: v1\n")
    (host.etc / "sglang.service.absent").write_text("")
    assert apply_with_rollback(Run(host), host, plan_for(host, "model: crash\n")) is False
    # The unit did not exist before the interrupted run: disabled and removed again.
    assert host.files() == {"sglang.yaml": "model: v1\n"}
    assert "disable --now sglang.service" in host.systemctl()


def test_an_interrupted_run_s_kept_files_go_once_a_run_succeeds(tmp_path):
    host = ScriptedHost(tmp_path)
    running(host, "model: half-applied\n")
    (host.etc / "sglang.yaml.last-good").write_text("model: v1\n")
    assert apply_with_rollback(Run(host), host, plan_for(host, "model: v2\n")) is True
    assert host.files() == {"sglang.service": "[Service]\n", "sglang.yaml": "model: v2\n"}


def test_a_stale_unit_removed_by_a_failed_run_comes_back(tmp_path):
    host = ScriptedHost(tmp_path)
    running(host)
    router = host.etc / "sglang-router.service"
    router.write_text("[Service]\nrouter\n")
    plan = plan_for(host, "model: crash\n", stale=(str(router),))
    assert apply_with_rollback(Run(host), host, plan) is False
    assert router.read_text() == "[Service]\nrouter\n"
    calls = host.systemctl()
    assert calls[0] == "disable --now sglang-router.service"
    assert calls[-2:] == ["enable sglang-router.service", "restart sglang-router.service"]


def test_a_group_member_that_does_not_come_up_rolls_the_whole_group_back(tmp_path, caplog):
    hosts = {name: ScriptedHost(tmp_path / name, name) for name in ("rank0", "rank1")}
    for host in hosts.values():
        running(host)
    run = Run(*hosts.values())
    configs = {"rank0": "model: v2\n", "rank1": "model: v2 crash\n"}
    for name in hosts:  # as the operation registers them while pyinfra checks for changes
        coordinator(run).group("pair").decide(name, applies=True)
    outcome: dict[str, bool] = {}

    def member(name: str, rank: int):
        host = hosts[name]
        plan = plan_for(
            host, configs[name], multinode_group="pair", node_rank=rank, group_hosts=tuple(hosts)
        )
        outcome[name] = apply_with_rollback(run, host, plan)

    with caplog.at_level("INFO"):
        join_all([gevent.spawn(member, n, r) for r, n in enumerate(hosts)], timeout=30)
    assert outcome == {"rank0": False, "rank1": False}
    for host in hosts.values():
        assert host.files()["sglang.yaml"] == "model: v1\n"
        assert host.systemctl() == RESTART + ROLLBACK
    assert "[rank0] the new configuration did not come up (group pair rolls back as one: " in (
        caplog.text
    )


def test_servers_behind_one_router_after_a_failed_turn_keep_their_version(tmp_path, caplog):
    hosts = [ScriptedHost(tmp_path / name, name) for name in ("a", "b")]
    for host in hosts:
        running(host)
    run = Run(*hosts)
    outcome = {}
    for host, config in zip(hosts, ("model: crash\n", "model: v2\n"), strict=True):
        plan = replace(plan_for(host, config), rolling_key="router r")
        with caplog.at_level("INFO"):
            outcome[host.name] = apply_with_rollback(run, host, plan)
    assert outcome == {"a": False, "b": False}
    assert hosts[1].commands == [] and hosts[1].files()["sglang.yaml"] == "model: v1\n"
    assert "failed on a first; this host keeps serving its running version" in caplog.text


# --- the plan -------------------------------------------------------------------------------


def test_the_plan_restarts_every_unit_of_its_files_when_told_none():
    files = (
        RenderedFile("/etc/systemd/system/sglang.service", "x", "644"),
        RenderedFile("/etc/systemd/system/sglang-router.service", "x", "644"),
        RenderedFile("/etc/sglang/sglang.yaml", "secret", "600"),
    )
    service = ServiceFiles("sglang.service", files, HEALTH, 600, router_health_url="http://r/h")
    owners = {f.path: "root:root" for f in files}
    plan = plan_apply(service, keep_previous=True, restart=(), owners=owners)
    assert plan.units == plan.restart == ("sglang.service", "sglang-router.service")
    assert plan.health == (
        HealthCheck("sglang.service", HEALTH, 600),
        HealthCheck("sglang-router.service", "http://r/h", engine.ROUTER_START_TIMEOUT_S),
    )
    only = plan_apply(service, keep_previous=True, restart=("sglang.service",), owners=owners)
    assert only.restart == ("sglang.service",)
    assert "secret" not in repr(plan)  # pyinfra prints the command's string form


def test_describe_says_the_change_in_words():
    files = (
        RenderedFile("/etc/systemd/system/sglang.service", "x", "644"),
        RenderedFile("/etc/sglang/sglang.yaml", "x", "600"),
    )
    service = ServiceFiles(
        "sglang.service",
        files,
        None,
        1200,
        stale=("/etc/systemd/system/sglang-router.service",),
        multinode_group="pair",
        node_rank=1,
        group_hosts=("a", "b"),
        rank0_first=True,
    )
    plan = plan_apply(
        service, keep_previous=False, restart=(), owners={f.path: "root:root" for f in files}
    )
    assert plan.describe() == [
        "write /etc/systemd/system/sglang.service",
        "write /etc/sglang/sglang.yaml",
        "remove /etc/systemd/system/sglang-router.service (its unit is no longer configured)",
        "restart sglang.service (rank 0 of group pair stopped first)",
        "wait up to 1200 s for sglang.service active",
        "come up or roll back with multi-node group pair",
        "on failure: stop and disable the units (no running version to go back to)",
    ]
    routed = plan_apply(
        ServiceFiles("sglang.service", files[:1], HEALTH, 600, rolling_group="router a"),
        keep_previous=True,
        restart=("sglang.service",),
        owners={files[0].path: "root:root"},
    )
    assert routed.describe() == [
        "write /etc/systemd/system/sglang.service",
        "restart sglang.service",
        f"wait up to 600 s for {HEALTH}",
        "take turns behind router a, 1 at a time",
        "on failure: put the running version back and restart it",
    ]


def test_one_coordinator_per_run():
    first, second = Run(), Run()
    assert coordinator(first) is coordinator(first)
    assert coordinator(first) is not coordinator(second)
    assert coordinator(first).group("g") is coordinator(first).group("g")
    assert coordinator(first).group(None) is None
    # An operation holds pyinfra's context proxy, its FunctionCommand the State itself.
    with ctx_state.use(second):
        assert coordinator(state) is coordinator(second)


def test_a_dry_run_logs_the_plan_in_words(monkeypatch, caplog):
    """--dry: the operation says what its apply would do, one line each."""
    query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
    facts = {
        NvidiaGpus: NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", query)),
        NvidiaTopology: {},
        NvidiaP2P: {},
        PcieAcs: PcieAcs().process(["### lspci no"]),
        IommuState: IommuState().process(["", "### iommu_groups=0"]),
        Virtualization: Virtualization().process(["none", "none"]),
        FileDigests: {},
        SystemdStatus: {},
    }
    monkeypatch.setattr(role, "dry_run", lambda: True)
    config = HostConfig(sglang_model_profile="dense-bf16")
    with caplog.at_level("INFO"):
        [command], _ = run_operation(role.sglang_service, facts, executing=False, config=config)
    assert command.startswith("FunctionCommand(apply_with_rollback, (ApplyPlan(")
    assert "sglang.service would: write /etc/sglang/sglang.yaml" in caplog.text
    assert "sglang.service would: on failure: stop and disable the units" in caplog.text
