"""The watchdog (issue 37 part 3): its inventory fields, its rendered units, its host program
(one run at a time, systemctl and the decode check replaced by recorders) and its audit
findings. On real hosts: tests/integration/test_watchdog_on_hosts.py."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyinfra_sglang.audit.watchdog import findings_for_watchdog
from pyinfra_sglang.host_programs import watchdog as program
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.inventory.validation import validate_host_data
from pyinfra_sglang.serving.watchdog import watchdog_argv, watchdog_files

FIXTURES = Path(__file__).parent.parent / "fixtures"

API_KEY = "sk-watchdog-SECRET-0123456789"


# --- inventory ----------------------------------------------------------------------------


def test_the_watchdog_is_off_by_default():
    config = HostConfig()
    assert config.sglang_watchdog is False
    assert (config.sglang_watchdog_interval_s, config.sglang_watchdog_failures) == (300, 3)
    assert config.sglang_watchdog_max_restarts_per_hour == 2


@pytest.mark.parametrize(
    ("values", "field", "allowed"),
    [
        ({"sglang_watchdog_interval_s": 10}, "sglang_watchdog_interval_s", "30..86400"),
        ({"sglang_watchdog_interval_s": True}, "sglang_watchdog_interval_s", "30..86400"),
        ({"sglang_watchdog_failures": 0}, "sglang_watchdog_failures", "1..100"),
        (
            {"sglang_watchdog_max_restarts_per_hour": 0},
            "sglang_watchdog_max_restarts_per_hour",
            "1..60",
        ),
        ({"sglang_watchdog_timeout_s": 1}, "sglang_watchdog_timeout_s", "5..3600"),
        ({"sglang_watchdog": "sometimes"}, "sglang_watchdog", "true, false"),
    ],
)
def test_bad_watchdog_settings_name_host_field_and_what_is_allowed(values, field, allowed):
    config, [problem] = validate_host_data("gpu1", values)
    assert config is None
    text = str(problem)
    assert text.startswith(f"host gpu1: {field} = ")
    assert re.search(r"; allowed: .*" + re.escape(allowed), text), text


def test_a_multinode_member_gets_no_watchdog():
    with pytest.raises(ValueError, match="sglang_watchdog") as caught:
        HostConfig(sglang_watchdog=True, sglang_multinode_group="pair")
    assert "restarts only with its group" in str(caught.value)


# --- rendered files -----------------------------------------------------------------------


def config(**values) -> HostConfig:
    return HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_watchdog=True,
        sglang_api_key_file="/nonexistent/key",
        **values,
    )


def test_units_are_deterministic_and_carry_the_settings_not_the_key():
    first = watchdog_files(config(sglang_watchdog_interval_s=45, sglang_watchdog_failures=2))
    again = watchdog_files(config(sglang_watchdog_interval_s=45, sglang_watchdog_failures=2))
    assert [(f.path, f.content, f.mode) for f in first] == [
        (f.path, f.content, f.mode) for f in again
    ]
    paths = [f.path for f in first]
    assert paths == [
        "/usr/local/lib/pyinfra-sglang/watchdog/watchdog.py",
        "/usr/local/lib/pyinfra-sglang/watchdog/decode_client.py",
        "/usr/local/lib/pyinfra-sglang/watchdog/api_key.py",
        "/etc/systemd/system/sglang-watchdog.service",
        "/etc/systemd/system/sglang-watchdog.timer",
    ]
    service, timer = first[3].content, first[4].content
    assert "OnUnitActiveSec=45\n" in timer and "AccuracySec=1\n" in timer
    assert "--failures 2" in service and "--api-key-file /etc/sglang/sglang.yaml" in service
    assert "StateDirectory=sglang-watchdog\nStateDirectoryMode=0700\nUMask=0077\n" in service
    assert "Type=oneshot" in service and "--health-url http://127.0.0.1:30000/health" in service
    # The profile's start timeout is the health wait's; the oneshot may take the check, the
    # drain, the start and a margin.
    assert "--start-timeout 600" in service and "TimeoutStartSec=900\n" in service
    assert "api-key " not in service.replace("api-key-file", "")


def test_without_an_api_key_file_no_key_is_read():
    argv = watchdog_argv(HostConfig(sglang_model_profile="dense-bf16", sglang_watchdog=True))
    assert "--api-key-file" not in argv


# --- the host program ---------------------------------------------------------------------


class Host:
    """systemctl and the decode check as the program sees them; what it asked, in order."""

    def __init__(self, answers: list[bool], active: str = "active"):
        self.answers = list(answers)
        self.active = active
        self.calls: list[tuple] = []
        self.healthy_after_restart = True
        self.reason = "timeout"  # of a failed check
        self.active_for_s = 0.0  # since the unit became active (at stamp)
        self.stamp: int | None = None  # systemd does not say, unless set
        self.progress: list[tuple[float | None, str]] = []  # /metrics readings, in order

    def read_progress(self, url, key):
        self.calls.append(("metrics", url, key))
        return self.progress.pop(0) if self.progress else (None, "/metrics answered 404")

    def systemctl(self, *args):
        self.calls.append(("systemctl", *args))
        out = self.active if args[0] == "is-active" else ""
        if args[0] == "show":
            out = "ActiveState=active\nSubState=running\nExecMainStatus=0\nNRestarts=0\n"
        return SimpleNamespace(returncode=0, stdout=out + "\n", stderr="")

    def decode_check(self, url, expect, api_key, timeout):
        self.calls.append(("decode", url, api_key))
        ok = self.answers.pop(0)
        return {
            "ok": ok,
            "reason": "pass" if ok else self.reason,
            "message": "ok" if ok else f"no answer within {timeout} s (key {API_KEY})",
            "ttft_s": 0.01 if ok else None,
        }

    @property
    def restarts(self) -> int:
        return sum(1 for call in self.calls if call[:2] == ("systemctl", "restart"))


@pytest.fixture
def host(monkeypatch, tmp_path):
    def make(answers, **kwargs):
        fake = Host(answers, **kwargs)
        monkeypatch.setattr(program, "systemctl", fake.systemctl)
        monkeypatch.setattr(program, "decode_check", fake.decode_check)
        monkeypatch.setattr(program, "read_progress", fake.read_progress)
        monkeypatch.setattr(program, "active_since_us", lambda unit: fake.stamp)
        monkeypatch.setattr(program, "seconds_since", lambda stamp: fake.active_for_s)
        monkeypatch.setattr(
            program, "health_status", lambda url: 200 if fake.healthy_after_restart else 503
        )
        monkeypatch.setattr(program.time, "sleep", lambda s: None)
        return fake

    key = tmp_path / "sglang.yaml"
    key.write_text(f'model-path: "x"\napi-key: "{API_KEY}"\n')
    return make


def args(tmp_path, **over) -> list[str]:
    values = {
        "--unit": "sglang.service",
        "--url": "http://127.0.0.1:30000",
        "--health-url": "http://127.0.0.1:30000/health",
        "--api-key-file": str(tmp_path / "sglang.yaml"),
        "--timeout": "5",
        "--failures": "2",
        "--max-restarts-per-hour": "2",
        "--start-timeout": "30",
        "--state": str(tmp_path / "state.json"),
        "--guard": str(tmp_path / "sglang.service"),
    }
    values.update(over)
    return [word for pair in values.items() for word in pair]


def run(tmp_path, now, **over) -> int:
    return program.run_once(program.parse_args(args(tmp_path, **over)), now=now)


def state(tmp_path) -> dict:
    return json.loads((tmp_path / "state.json").read_text())


def test_a_healthy_server_is_never_restarted(host, tmp_path, capsys):
    fake = host([True] * 5)
    for minute in range(5):
        assert run(tmp_path, now=1000.0 + 60 * minute) == 0
    assert fake.restarts == 0
    assert state(tmp_path)["failures"] == 0 and state(tmp_path)["restarts"] == []
    assert stat.S_IMODE(os.stat(tmp_path / "state.json").st_mode) == 0o600
    # The key went to the check from the config file, never to the output.
    assert all(call[2] == API_KEY for call in fake.calls if call[0] == "decode")
    assert API_KEY not in capsys.readouterr().out


def test_failures_in_a_row_restart_and_the_hourly_limit_holds(host, tmp_path, capsys):
    fake = host([False] * 8)
    for index in range(8):
        run(tmp_path, now=10_000.0 + 60 * index)
    # Two failures a restart; two restarts an hour: the third restart is held.
    assert fake.restarts == 2
    saved = state(tmp_path)
    assert [entry["outcome"] for entry in saved["restarts"]] == ["healthy", "healthy"]
    assert [entry["at"] for entry in saved["restarts"]] == [10_060.0, 10_180.0]
    assert saved["held"]["until"] == 10_060.0 + 3600
    out = capsys.readouterr().out
    assert "<5>restarting sglang.service: 2 decode checks failed in a row (timeout)" in out
    assert (
        "<3>NOT restarting sglang.service: the watchdog restarted it 2 times in the last hour"
        in (out)
    )
    assert API_KEY not in out  # the check's message is cut, but the key is not ours to print
    # An hour after the first restart, one more is allowed.
    fake.answers = [False, False]
    run(tmp_path, now=10_060.0 + 3600 + 1)
    assert fake.restarts == 3


def test_a_pass_clears_the_count(host, tmp_path):
    fake = host([False, True, False, True])
    for index in range(4):
        run(tmp_path, now=100.0 + index)
    assert fake.restarts == 0 and state(tmp_path)["failures"] == 0


def test_a_server_that_does_not_come_back_is_said_so(host, tmp_path, capsys, monkeypatch):
    fake = host([False, False])
    fake.healthy_after_restart = False
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(program, "monotonic", lambda: float(next(clock)))
    run(tmp_path, now=1.0)
    run(tmp_path, now=2.0)
    [entry] = state(tmp_path)["restarts"]
    assert entry["outcome"] == "http://127.0.0.1:30000/health not healthy after 30 s"
    assert "did not come back after the watchdog's restart" in capsys.readouterr().out


@pytest.mark.parametrize("reason", ["connection-refused", "loading"])
def test_a_loading_server_is_not_failed_within_its_start_timeout(host, tmp_path, capsys, reason):
    fake = host([False] * 4)
    fake.reason = reason
    fake.stamp, fake.active_for_s = 5_000_000, 12.0  # of its 30 s start timeout
    run(tmp_path, now=100.0)
    run(tmp_path, now=130.0)
    assert state(tmp_path)["failures"] == 0 and fake.restarts == 0
    assert state(tmp_path)["last_check"] == {"at": 130.0, "ok": None, "reason": "starting"}
    assert f"the server is loading ({reason}; active for 12 s of its 30 s start timeout)" in (
        capsys.readouterr().out
    )
    # Past its start timeout the same answers are failures.
    fake.active_for_s = 31.0
    run(tmp_path, now=160.0)
    run(tmp_path, now=190.0)
    assert fake.restarts == 1


@pytest.mark.parametrize("stamp", [None, 5_000_000])
def test_only_the_answers_of_a_load_are_excused(host, tmp_path, stamp):
    # A hang (timeout) right after the start, or a start time systemd does not give: counted.
    fake = host([False, False])
    fake.stamp, fake.active_for_s = stamp, 5.0
    fake.reason = "timeout" if stamp else "connection-refused"
    run(tmp_path, now=100.0)
    run(tmp_path, now=130.0)
    assert fake.restarts == 1


def test_once_a_start_answered_its_503s_are_failures(host, tmp_path):
    # SGLang's /health answers 503 also when it gets no token back within 20 s: after an
    # answer in this start, that is a server gone bad, not the load.
    fake = host([True, False, False])
    fake.stamp, fake.active_for_s = 5_000_000, 12.0
    run(tmp_path, now=100.0)
    assert state(tmp_path)["answered_activation"] == 5_000_000
    fake.reason = "loading"
    run(tmp_path, now=130.0)
    run(tmp_path, now=160.0)
    assert fake.restarts == 1
    # A new start (another stamp) is loading again.
    fake.stamp, fake.answers = 9_000_000, [False]
    run(tmp_path, now=400.0)
    assert state(tmp_path)["last_check"]["reason"] == "starting"


def test_a_saturated_server_that_progresses_is_not_restarted(host, tmp_path, capsys):
    fake = host([False] * 6)
    working = 1000.0 + program.OWN_TOKENS + 1
    fake.progress = [(1000.0, ""), (working, "")] * 3
    for index in range(3):
        run(tmp_path, now=100.0 + 30 * index)
    assert fake.restarts == 0 and state(tmp_path)["failures"] == 0
    assert state(tmp_path)["last_check"]["reason"] == "busy"
    out = capsys.readouterr().out
    assert f"the server is working, {program.OWN_TOKENS + 1} tokens processed" in out
    assert API_KEY not in out
    # Metrics read with the key, before and after the check.
    assert [call[0] for call in fake.calls[:4]] == ["systemctl", "metrics", "decode", "metrics"]
    assert fake.calls[1][2] == API_KEY


@pytest.mark.parametrize(
    ("readings", "said"),
    [
        ([(1000.0, ""), (1100.0, "")], "; 100 tokens processed during the check"),
        ([(1000.0, ""), (1000.0 + program.OWN_TOKENS, "")], "tokens processed during the check"),
        ([(None, "/metrics answered 401"), (None, "x")], "unknown: /metrics answered 401"),
        ([(1000.0, ""), (None, "/metrics could not be read (TimeoutError)")], "unknown"),
        ([(5000.0, ""), (10.0, "")], "counters went back"),
    ],
)
def test_a_hung_server_or_unread_counters_count_the_failure(host, tmp_path, capsys, readings, said):
    fake = host([False, False])
    fake.progress = readings * 2
    run(tmp_path, now=100.0)
    run(tmp_path, now=130.0)
    assert fake.restarts == 1
    assert said in capsys.readouterr().out


def test_a_wrong_answer_counts_whatever_the_load(host, tmp_path):
    fake = host([False, False])
    fake.reason = "wrong-answer"
    fake.progress = [(1000.0, ""), (1000.0 + 10 * program.OWN_TOKENS, "")] * 2
    run(tmp_path, now=100.0)
    run(tmp_path, now=130.0)
    assert fake.restarts == 1


def test_the_judgement_on_real_sglang_readings():
    """Real SGLang 0.5.17 on an H100 (tests/fixtures/sglang-0.5.17-h100-watchdog/): loading,
    saturated by long prefills, and with its scheduler stopped; the program's judgement on
    each reading is the one the device run recorded, and the right one for its case."""
    rows = [
        json.loads(line)
        for line in (FIXTURES / "sglang-0.5.17-h100-watchdog/watchdog.jsonl")
        .read_text()
        .splitlines()
    ]
    answered, verdicts = False, {}
    for row in rows:
        reason = row["check"]["reason"]
        loading_s = None if answered else row["t_s"]
        answered = answered or reason not in program.UNANSWERED
        progress = row["progress"]
        excused = program.not_counted(
            reason, loading_s, 600.0, (progress["before"], ""), (progress["after"], "")
        )
        verdict = excused[0] if excused else "counted"
        assert verdict == row["verdict"], row
        verdicts.setdefault(row["case"], []).append((reason, verdict))
    loading = [verdict for reason, verdict in verdicts["loading"] if reason in program.UNANSWERED]
    assert len(loading) == 58 and set(loading) == {"starting"}
    assert verdicts["saturated"] == [("timeout", "busy")] * 3
    assert verdicts["sigstop"] == [("timeout", "counted")] * 2
    # The check's own tokens, alone on the server, stay under the allowance.
    idle = next(row for row in rows if row["case"] == "idle")
    assert 0 < idle["progress"]["after"] - idle["progress"]["before"] < program.OWN_TOKENS


def test_progress_is_read_from_a_real_sglang_metrics_page():
    page = (FIXTURES / "sglang-0.5.17-h200/capped/metrics.txt").read_text()
    first = page.split("### poll ")[1].split("\n", 1)[1]
    expected = sum(
        float(line.rsplit(" ", 1)[1])
        for line in first.splitlines()
        if line.startswith(("sglang:prompt_tokens_total{", "sglang:generation_tokens_total{"))
    )
    assert expected > 0 and program.parse_progress(first) == expected


@pytest.mark.parametrize(
    ("page", "value"),
    [
        ("", None),
        ("# HELP sglang:realtime_tokens_total x\n", None),
        ("sglang:num_running_reqs 3\n", None),
        ('sglang:realtime_tokens_total{mode="decode"} 10\n', 10.0),
        # The realtime counter where there is one: the totals count the same tokens again.
        (
            'sglang:realtime_tokens_total{mode="decode"} 10\n'
            'sglang:realtime_tokens_total{mode="prefill_compute"} 30\n'
            "sglang:generation_tokens_total 7\n",
            40.0,
        ),
        (
            'sglang:realtime_tokens_total{mode="decode",x="a} b"} 10\n'
            'sglang:realtime_tokens_total{mode="prefill_compute"} 5\n',
            15.0,
        ),
        ("sglang:generation_tokens_total NaN\n", None),
        ("sglang:generation_tokens_total -4\n", None),
        ("sglang:generation_tokens_total +Inf\n", None),
        ("sglang:generation_tokens_total abc\n", None),
        ("sglang:generation_tokens_total\n", None),
        ("sglang:generation_tokens_total_x 5\n", None),
        ("sglang:generation_tokens_total 7 1700000000000\n", 7.0),  # with a timestamp
    ],
)
def test_progress_reads_only_finite_counts_of_its_counters(page, value):
    assert program.parse_progress(page) == value


def test_nothing_is_checked_while_a_deploy_changes_the_service(host, tmp_path):
    fake = host([False, False])
    (tmp_path / "sglang.service.last-good").write_text("")
    run(tmp_path, now=1.0)
    run(tmp_path, now=2.0)
    assert fake.calls == []


def test_a_stopped_server_is_not_the_watchdog_s_to_start(host, tmp_path):
    fake = host([], active="inactive")
    run(tmp_path, now=1.0)
    assert fake.restarts == 0 and state(tmp_path)["last_check"]["reason"] == "not-inactive"


def test_the_deploy_and_the_watchdog_share_the_health_wait_s_rules():
    from roles import service_apply

    assert service_apply._unit_failure is program.unit_failure
    assert service_apply._setup_failure is program.setup_failure
    assert program.setup_failure({"SubState": "auto-restart", "ExecMainStatus": "219"})
    assert not program.setup_failure({"SubState": "auto-restart", "ExecMainStatus": "1"})


# --- the audit ----------------------------------------------------------------------------

TIMER = {"LoadState": "loaded", "ActiveState": "active", "SubState": "waiting"}


def test_the_audit_says_nothing_when_the_watchdog_is_off():
    assert findings_for_watchdog(False, None) == []
    assert findings_for_watchdog(True, None) == []  # not read: a record made before


def test_the_audit_warns_of_a_timer_that_does_not_run():
    [finding] = findings_for_watchdog(True, {"timer": {"LoadState": "not-found"}, "state": None})
    assert (finding.level, finding.code) == ("warn", "watchdog")
    assert "not installed" in finding.message


def test_the_audit_shows_the_state_and_the_last_restarts():
    reading = {
        "timer": TIMER,
        "state": {
            "failures": 0,
            "last_check": {"at": 7200.0, "ok": True, "reason": "pass"},
            "restarts": [{"at": 5000.0, "reason": "timeout", "outcome": "healthy"}],
            "held": None,
        },
    }
    watchdog, restarts = findings_for_watchdog(True, reading)
    assert (watchdog.level, watchdog.code) == ("ok", "watchdog")
    assert "1970-01-01T02:00:00Z passed (pass); 0 failed in a row" in watchdog.message
    assert (restarts.level, restarts.code) == ("warn", "watchdog-restarts")
    assert "1970-01-01T01:23:20Z (timeout; healthy again)" in restarts.message
    reading["state"]["last_check"]["at"] = 9000.0  # the restart over an hour before
    assert findings_for_watchdog(True, reading)[1].level == "ok"


def test_the_audit_fails_a_watchdog_held_at_its_limit():
    reading = {
        "timer": TIMER,
        "state": {
            "failures": 4,
            "last_check": {"at": 100.0, "ok": False, "reason": "timeout"},
            "restarts": [
                {"at": 10.0, "reason": "timeout", "outcome": "healthy"},
                {"at": 50.0, "reason": "timeout", "outcome": "healthy"},
            ],
            "held": {"since": 90.0, "until": 3610.0},
        },
    }
    watchdog, restarts = findings_for_watchdog(True, reading)
    assert watchdog.level == "warn" and "4 failed in a row" in watchdog.message
    assert restarts.level == "fail" and "restarts nothing before 1970-01-01T01:00:10Z" in (
        restarts.message
    )
