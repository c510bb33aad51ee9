"""The service role's health wait, against a host whose systemctl and curl answers are
scripted: a crash of the server fails at once; a start that systemd itself could not set up
(its own exit statuses, e.g. 219/CGROUP, seen on container hosts) is left to the unit's
Restart= a bounded number of times."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roles import service_apply

HEALTH = "http://127.0.0.1:30000/health"


class ScriptedHost:
    """Answers `systemctl show` with the next status of a script (the last one repeats) and
    curl with 200 once the unit is active."""

    print_prefix = "[gpu-1] "
    current_op_global_arguments: dict = {}

    def __init__(self, statuses: list[dict[str, str]]):
        self.statuses = statuses
        self.shown = 0

    def run_shell_command(self, command: str, **arguments):
        if command.startswith("systemctl show"):
            status = self.statuses[min(self.shown, len(self.statuses) - 1)]
            self.shown += 1
            text = "\n".join(f"{key}={value}" for key, value in status.items())
        else:
            active = self.statuses[min(self.shown, len(self.statuses)) - 1]
            text = "200" if active.get("ActiveState") == "active" else "000"
        return True, [SimpleNamespace(line=line) for line in text.splitlines()]


def status(active: str, sub: str, exit_status: int = 0, restarts: int = 0) -> dict[str, str]:
    return {
        "ActiveState": active,
        "SubState": sub,
        "ExecMainStatus": str(exit_status),
        "NRestarts": str(restarts),
    }


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(service_apply.time, "sleep", lambda seconds: None)


def test_a_crash_of_the_server_fails_at_once():
    host = ScriptedHost([status("activating", "auto-restart", exit_status=1)])
    problem = service_apply.wait_healthy(host, "sglang.service", HEALTH, timeout_s=60)
    assert problem == "sglang.service exited (activating/auto-restart)"
    assert host.shown == 1


def test_a_systemd_setup_failure_is_left_to_restart_then_healthy():
    host = ScriptedHost(
        [
            status("activating", "auto-restart", exit_status=219, restarts=0),
            status("activating", "auto-restart", exit_status=219, restarts=0),
            status("activating", "start", exit_status=0, restarts=1),
            status("active", "running", exit_status=0, restarts=1),
        ]
    )
    assert service_apply.wait_healthy(host, "sglang.service", HEALTH, timeout_s=60) is None


def test_setup_failures_are_tolerated_a_bounded_number_of_times():
    script = [
        status("activating", "auto-restart", exit_status=219, restarts=restarts)
        for restarts in range(6)
    ]
    host = ScriptedHost(script)
    problem = service_apply.wait_healthy(host, "sglang.service", HEALTH, timeout_s=60)
    assert problem == "sglang.service exited (activating/auto-restart)"
    assert service_apply.SETUP_FAILURES_TOLERATED == 2
