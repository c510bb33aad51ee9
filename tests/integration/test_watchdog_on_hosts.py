"""The watchdog (sglang_watchdog) on a real Debian 12 test host serving the stand-in SGLang
server: installed by deploy/site.py (twice: the second apply changes nothing), its timer
runs the decode check; a healthy server is never restarted, nor one that is loading (its
warm-up held) or saturated (its check queued while its token counters move); a server that
hangs generation while /health answers 200 (the stand-in's hang switch, as
sgl-project/sglang #6624, #4191) is restarted after the failures in a row; the hourly limit
then holds, with its journal line; the audit shows the state and the restart; off again, it
is removed."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.hosts.apply import apply
from tests.hosts.audit_report import findings

pytestmark = pytest.mark.hosts

API_KEY = "sk-site-APIKEY-0123456789"
WATCHDOG_OP = "SGLang service | Run the watchdog: a decode check every 30 s"
NO_WATCHDOG_OP = "SGLang service | No watchdog"
STATE = "/var/lib/sglang-watchdog/state.json"
HANG_FILE = "/run/sglang-standin/30000.hang-generation"
SATURATED_FILE = "/run/sglang-standin/30000.saturated"
READY_GATE = "/run/sglang-standin/ready-gate"
LOADING_DROPIN = "/run/systemd/system/sglang.service.d/loading.conf"
WATCHDOG = (
    "--data",
    "sglang_watchdog=true",
    # The documented floor: the timer's first run comes within the test.
    "--data",
    "sglang_watchdog_interval_s=30",
    "--data",
    "sglang_watchdog_timeout_s=5",
    "--data",
    "sglang_watchdog_failures=2",
    "--data",
    "sglang_watchdog_max_restarts_per_hour=1",
)


def main_pid(host_pool, test_host) -> str:
    return host_pool.run(
        test_host, "systemctl show -p MainPID --value sglang.service"
    ).stdout.strip()


def state(host_pool, test_host) -> dict:
    return json.loads(host_pool.run(test_host, f"cat {STATE}").stdout)


def check_now(host_pool, test_host) -> None:
    """One run of the watchdog's own unit, as its timer starts it (a oneshot: returns when
    the run ended, the restart and health wait included)."""
    done = host_pool.run(test_host, "systemctl start sglang-watchdog.service", check=False)
    assert done.returncode == 0, journal(host_pool, test_host)


def journal(host_pool, test_host) -> str:
    return host_pool.run(
        test_host, "journalctl -u sglang-watchdog.service -o cat --no-pager"
    ).stdout


def chat(address: str) -> str:
    request = urllib.request.Request(
        f"http://{address}:30000/v1/chat/completions",
        data=json.dumps(
            {"model": "x", "messages": [{"role": "user", "content": "capital of France?"}]}
        ).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def test_the_watchdog_restarts_a_hung_server_within_its_limit(
    host_pool, hosts, inventory, tmp_path
):
    host = hosts[0]
    only = ("--limit", host.address)
    run = lambda command: host_pool.run(host, command).stdout  # noqa: E731
    try:
        # Earlier tests leave the site hosts as they need them (another profile, tuned
        # settings): converge to the inventory first, so that only the watchdog differs.
        converged = apply(inventory, options=only)
        assert converged.returncode == 0 and not converged.errors(), converged.describe()
        pid = main_pid(host_pool, host)
        first = apply(inventory, options=(*only, *WATCHDOG))
        assert first.returncode == 0, first.describe()
        # The watchdog alone changed: the server kept running, untouched.
        assert first.changed(host.address) == [WATCHDOG_OP], first.describe()
        assert main_pid(host_pool, host) == pid
        again = apply(inventory, options=(*only, *WATCHDOG))
        again.assert_unchanged()
        assert WATCHDOG_OP in again.unchanged(host.address)
        assert run(
            "systemctl is-active sglang-watchdog.timer; systemctl is-enabled sglang-watchdog.timer"
        ).split() == ["active", "enabled"]
        unit = run("cat /etc/systemd/system/sglang-watchdog.service")
        assert API_KEY not in unit and "--api-key-file /etc/sglang/sglang.yaml" in unit

        # Healthy: the timer's own first run (30 s after it started) passes, as do more.
        deadline = time.monotonic() + 90
        while run(f"test -f {STATE} && echo yes || true").strip() != "yes":
            assert time.monotonic() < deadline, journal(host_pool, host)
            time.sleep(2)
        check_now(host_pool, host)
        check_now(host_pool, host)
        healthy = state(host_pool, host)
        assert healthy["failures"] == 0 and healthy["restarts"] == [], healthy
        assert healthy["last_check"]["ok"] is True
        assert main_pid(host_pool, host) == pid
        assert run(f"stat -c '%a %U' {STATE} /var/lib/sglang-watchdog").split() == [
            "600",
            "root",
            "700",
            "root",
        ]

        # Loading: restarted with its warm-up held (nothing listens, then /health and chat
        # answer 503), the failed checks are the load, not failures; no restart.
        run(
            f"mkdir -p {LOADING_DROPIN.rsplit('/', 1)[0]} && printf '%s\\n' '[Service]' "
            f"'Environment=SGLANG_STANDIN_READY_FILE={READY_GATE}' "
            f"'Environment=SGLANG_STANDIN_LOAD_S=4' > {LOADING_DROPIN} && "
            f"rm -f {READY_GATE} && systemctl daemon-reload && systemctl restart sglang.service"
        )
        loading = main_pid(host_pool, host)
        for _ in range(3):
            check_now(host_pool, host)
        starting = state(host_pool, host)
        assert starting["failures"] == 0 and starting["restarts"] == [], starting
        assert starting["last_check"]["reason"] == "starting", starting
        assert main_pid(host_pool, host) == loading
        assert "decode check not counted: the server is loading (" in journal(host_pool, host)
        run(f"touch {READY_GATE} && rm -f {LOADING_DROPIN} && systemctl daemon-reload")
        deadline = time.monotonic() + 30
        while state(host_pool, host)["last_check"]["ok"] is not True:
            assert time.monotonic() < deadline, journal(host_pool, host)
            check_now(host_pool, host)
        pid = loading

        # Saturated: the check queues past its timeout while the server's token counters
        # move (other clients' work): busy, not hung; no restart.
        run(f"echo {pid} > {SATURATED_FILE}")
        for _ in range(3):
            check_now(host_pool, host)
        busy = state(host_pool, host)
        assert busy["failures"] == 0 and busy["restarts"] == [], busy
        assert busy["last_check"]["reason"] == "busy", busy
        assert main_pid(host_pool, host) == pid
        assert "decode check not counted (timeout): the server is working" in journal(
            host_pool, host
        )
        run(f"rm -f {SATURATED_FILE}")

        # Hung while alive: /health answers 200, generation never returns.
        run(f"echo {pid} > {HANG_FILE}")
        with urllib.request.urlopen(f"http://{host.address}:30000/health", timeout=10) as r:
            assert r.status == 200
        for _ in range(4):
            check_now(host_pool, host)
            if main_pid(host_pool, host) != pid:
                break
        restarted = main_pid(host_pool, host)
        assert restarted != pid, journal(host_pool, host)
        after = state(host_pool, host)
        [restart] = after["restarts"]
        assert restart["reason"] == "timeout" and restart["outcome"] == "healthy", after
        assert "Paris" in chat(host.address)  # the new process is not hung
        lines = journal(host_pool, host)
        assert "decode check failed (timeout), 2 of 2 in a row" in lines
        assert "restarting sglang.service: 2 decode checks failed in a row (timeout)" in lines
        assert "sglang.service is healthy again after the restart" in lines
        assert API_KEY not in lines
        # The restart drained as a deploy's does (the stand-in logs real SGLang's lines).
        assert "Draining requests and shutting down" in run(
            f"journalctl -u sglang.service _PID={pid} -o cat --no-pager"
        )

        # Hung again: one restart an hour is the limit, so it holds, and says so.
        run(f"echo {restarted} > {HANG_FILE}")
        for _ in range(3):
            check_now(host_pool, host)
        assert main_pid(host_pool, host) == restarted
        held = state(host_pool, host)
        assert len(held["restarts"]) == 1 and held["held"], held
        assert (
            "NOT restarting sglang.service: the watchdog restarted it 1 times in the last hour"
            in (journal(host_pool, host))
        )

        # The audit shows it: held at its limit, from the watchdog's state. The hang is
        # lifted first: the audit's own decode check would wait out its 160 s deadline on a
        # hung server (checks/audit.py), and the state it reads stays as the last check left
        # it (the timer's next run is 30 s after that check started: OnUnitActiveSec).
        run(f"rm -f {HANG_FILE}")
        report_dir = tmp_path / "audit"
        audited = apply(
            inventory,
            "deploy/audit.py",
            options=(*only, *WATCHDOG, "--data", f"audit_report_dir={report_dir}"),
        )
        # The audit fails this host (the restarts below), so it exits 1, and changes nothing.
        audited.assert_unchanged(returncode=1)
        by_code = findings(report_dir, host.address)
        [watchdog] = by_code["watchdog"]
        [restarts] = by_code["watchdog-restarts"]
        assert watchdog["level"] == "warn" and "failed in a row" in watchdog["message"]
        assert restarts["level"] == "fail", restarts
        assert "(timeout; healthy again)" in restarts["message"]
        assert state(host_pool, host) == held  # no run of the watchdog during the audit
    finally:
        host_pool.run(
            host,
            f"rm -f {HANG_FILE} {SATURATED_FILE} {LOADING_DROPIN}; systemctl daemon-reload",
            check=False,
        )
        # Off again: the watchdog is removed, then nothing changes.
        back = apply(inventory, options=only)
        assert back.returncode == 0, back.describe()
    assert NO_WATCHDOG_OP in back.changed(host.address), back.describe()
    assert (
        run(
            "ls /etc/systemd/system/sglang-watchdog.timer /var/lib/sglang-watchdog 2>&1 | wc -l"
        ).strip()
        == "2"
    )  # two "No such file" lines
    assert not run("systemctl list-timers --all --no-legend sglang-watchdog.timer").strip()
    quiet = apply(inventory, options=only)
    quiet.assert_unchanged()
