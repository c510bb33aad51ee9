"""deploy/site.py's SGLang service role on real Debian 12 test hosts, serving the stand-in
SGLang server (tests/hosts/standins/sglang): health wait, secrets, GPU upgrade, rollback."""

from __future__ import annotations

import http.client
import json
import shlex
import threading
import time
import urllib.request

import pytest

from pyinfra_sglang.inventory import HostConfig
from tests.hosts.apply import apply
from tests.hosts.site_model import other_model

pytestmark = pytest.mark.hosts

VENV = HostConfig(python_version="3.11").venv_path  # the site hosts' venv
API_KEY = "sk-site-APIKEY-0123456789"
HF_TOKEN = "hf_site_TOKEN_abcdefghij"
SERVE_OP = "SGLang service | Serve dense-bf16 with SGLang 0.5.23"
# The gateway data/python.toml pins for the inventory's SGLang (0.5.22 and later: smg).
ROUTER_INSTALL_OP = "SGLang service | Install SGLang's router smg 1.13.0"


def record(host_pool, test_host) -> dict:
    return json.loads(host_pool.run(test_host, "cat /run/sglang-standin/30000.json").stdout)


def chat(address: str, question: str, key: str | None = API_KEY) -> str:
    request = urllib.request.Request(
        f"http://{address}:30000/v1/chat/completions",
        data=json.dumps(
            {"model": "x", "messages": [{"role": "user", "content": question}]}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def main_pid(host_pool, test_host) -> str:
    return host_pool.run(
        test_host, "systemctl show -p MainPID --value sglang.service"
    ).stdout.strip()


def test_service_runs_healthy_as_its_user_with_secrets_kept_private(
    host_pool, hosts, inventory, site_first_apply
):
    for h in hosts:
        assert SERVE_OP in site_first_apply.changed(h.address)
        # The model download, which runs first and as the server's user, created it; the
        # service role then finds it there.
        assert "SGLang service | Create the sglang system user" in site_first_apply.unchanged(
            h.address
        )
        run = lambda command, h=h: host_pool.run(h, command).stdout  # noqa: E731
        assert run(
            "systemctl is-active sglang.service; systemctl is-enabled sglang.service"
        ).split() == ["active", "enabled"]
        with urllib.request.urlopen(f"http://{h.address}:30000/health", timeout=10) as response:
            assert response.status == 200
        assert "Paris" in chat(h.address, "What is the capital of France?")
        started = record(host_pool, h)
        argv = started["argv"]
        assert argv[argv.index("--tp-size") + 1] == "2"  # the two replayed H200s
        assert started["api_key_from"] == "config" and started["hf_token_set"] is True
        # The env file is root's (systemd reads it before dropping privileges), the config
        # file the server's (it reads --config itself); their folder root:sglang 0750.
        assert run(
            "stat -c '%a %U %G' /etc/sglang/sglang.env /etc/sglang/sglang.yaml /etc/sglang"
        ).splitlines() == ["600 root root", "600 sglang sglang", "750 root sglang"]
        assert not [name for name in run("ls -A /etc/sglang").split() if name.endswith(".new")]
        assert run("getent passwd sglang").strip().endswith(":/var/lib/sglang:/usr/sbin/nologin")
        assert run("stat -c '%a %U %G' /var/lib/sglang/huggingface").split() == [
            "750",
            "sglang",
            "sglang",
        ]
        pid = main_pid(host_pool, h)
        assert run(f"ps -o user= -p {pid}").strip() == "sglang"
        assert "NoNewPrivs:\t1" in run(f"cat /proc/{pid}/status")
        unit = run("cat /etc/systemd/system/sglang.service")
        assert API_KEY not in unit and "--api-key" not in unit and HF_TOKEN not in unit
        assert API_KEY not in run(f"cat /proc/{pid}/cmdline | tr '\\0' ' '")
        # The server logs its arguments, the key among them, as SGLang does (sglang#37457):
        # what the tool prints of this journal has to mask it.
        assert f"api_key='{API_KEY}'" in run("journalctl -u sglang.service -o cat --no-pager")
    assert API_KEY not in site_first_apply.stderr + site_first_apply.stdout
    assert HF_TOKEN not in site_first_apply.stderr + site_first_apply.stdout
    with pytest.raises(urllib.error.HTTPError, match="401"):
        chat(hosts[0].address, "What is the capital of France?", key=None)


def in_sandbox(host_pool, test_host, command: str) -> int:
    """Exit status of ``command`` run as the service's user inside its mount namespace."""
    pid = main_pid(host_pool, test_host)
    return host_pool.run(
        test_host,
        f"nsenter -t {pid} -m -S $(id -u sglang) -G $(id -g sglang) sh -c {shlex.quote(command)}",
        check=False,
    ).returncode


def test_the_server_is_sandboxed(host_pool, hosts, inventory):
    test_host = hosts[0]
    # Caches: its own, writable; the rest of the system read-only, the secrets' folder
    # readable to it, home folders gone.
    assert in_sandbox(host_pool, test_host, "touch /var/lib/sglang/triton/probe") == 0
    assert in_sandbox(host_pool, test_host, "cat /etc/sglang/sglang.yaml >/dev/null") == 0
    for denied in (
        "touch /etc/sglang/probe",
        "touch /etc/probe",
        f"touch {VENV}/probe",
        "touch /var/lib/sglang/probe",
        "cat /etc/sglang/sglang.env",
        "ls /root",
    ):
        assert in_sandbox(host_pool, test_host, denied) != 0, denied
    host_pool.run(test_host, "rm -f /var/lib/sglang/triton/probe")
    shown = host_pool.run(
        test_host,
        "systemctl show -p User -p NoNewPrivileges -p ProtectSystem -p ProtectHome "
        "-p PrivateTmp -p RestrictSUIDSGID sglang.service",
    ).stdout.split()
    assert sorted(shown) == [
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "ProtectSystem=strict",
        "RestrictSUIDSGID=yes",
        "User=sglang",
    ]


def test_a_changed_secret_restarts_without_showing_it(host_pool, hosts, inventory, site_secrets):
    key_file = site_secrets / "api-key"
    key_file.write_text("sk-rotated-NEWKEY-987654\n")
    try:
        result = apply(inventory, options=("-vv",))
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            assert result.changed(h.address) == [SERVE_OP]
            # The run ends with one line a host: one operation changed each.
            assert f"[{h.address}] changed 1" in result.stderr, result.describe()
            assert "Paris" in chat(h.address, "France?", key="sk-rotated-NEWKEY-987654")
        assert "NEWKEY" not in result.stderr + result.stdout and API_KEY not in result.stderr
    finally:
        key_file.write_text(API_KEY + "\n")
        restored = apply(inventory)
        assert restored.returncode == 0, restored.describe()


def test_a_dry_run_of_a_converged_site_says_no_change_and_changes_nothing(
    host_pool, hosts, inventory
):
    pids = {h.address: main_pid(host_pool, h) for h in hosts}
    result = apply(inventory, dry=True)
    assert result.returncode == 0, result.describe()
    for h in hosts:
        assert f"[{h.address}] no change" in result.stderr, result.describe()
        assert main_pid(host_pool, h) == pids[h.address]
    assert result.report["results"] is None and not result.logged_changes()


def test_a_dry_run_names_the_service_operation_a_profile_change_would_apply(
    host_pool, hosts, inventory
):
    pids = {h.address: main_pid(host_pool, h) for h in hosts}
    settings = {h.address: record(host_pool, h)["settings"] for h in hosts}
    result = apply(
        inventory,
        dry=True,
        options=("--data", 'sglang_profile_overrides={"mem_fraction_static": 0.8}'),
    )
    assert result.returncode == 0, result.describe()
    for h in hosts:
        assert f"[{h.address}] would change: {SERVE_OP}\n" in result.stderr, result.describe()
        # Nothing ran: the server still runs its old settings, in the same process.
        assert main_pid(host_pool, h) == pids[h.address]
        assert record(host_pool, h)["settings"] == settings[h.address]


def test_gpu_upgrade_2_to_8_rebuilds_flash_attn_and_restarts_the_service_only(
    host_pool, hosts, inventory
):
    upgraded = hosts[0]
    host_pool.run(
        upgraded,
        "mkdir -p /etc/nvidia-smi-replay "
        "&& echo rtxpro6000x8-pcie-from-smiq > /etc/nvidia-smi-replay/capture",
    )
    try:
        result = apply(inventory)
        assert result.returncode == 0 and not result.errors(), result.describe()
        # flash-attn is built again for the new GPUs' architecture (sm_120; it was sm_90).
        assert result.changed(upgraded.address) == [
            "flash-attn | Build flash-attn 2.8.3",
            SERVE_OP,
        ], result.describe()
        assert result.changed(hosts[1].address) == []
        argv = record(host_pool, upgraded)["argv"]
        assert argv[argv.index("--tp-size") + 1] == "8"
        env = host_pool.run(upgraded, "cat /etc/sglang/sglang.env").stdout
        # Eight PCIe GPUs, no NVLink, on two sockets (the capture's topo -m has SYS pairs).
        assert "NCCL_P2P_LEVEL=SYS" in env
        again = apply(inventory)
        again.assert_unchanged()
    finally:
        host_pool.run(upgraded, "rm -f /etc/nvidia-smi-replay/capture")
        back = apply(inventory)
        assert back.returncode == 0, back.describe()
    argv = record(host_pool, upgraded)["argv"]
    assert argv[argv.index("--tp-size") + 1] == "2"


def streamed_chat(address: str, tokens: int, outcome: dict) -> None:
    """A streamed chat of exactly ``tokens`` tokens; outcome["deltas"] counts the content
    deltas, outcome["done"] whether [DONE] came, outcome["error"] what cut it."""
    body = json.dumps(
        {
            "model": "x",
            "messages": [{"role": "user", "content": "France?"}],
            "stream": True,
            "max_tokens": tokens,
            "ignore_eos": True,
        }
    )
    conn = http.client.HTTPConnection(address, 30000, timeout=300)
    outcome.update(deltas=0, done=False)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body,
            {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        response = conn.getresponse()
        outcome["status"] = response.status
        for line in response:
            data = line.decode().strip().removeprefix("data: ")
            if data == "[DONE]":
                outcome["done"] = True
            elif data.startswith("{"):
                choices = json.loads(data)["choices"]
                # Tokens only: real SGLang (and the stand-in) first sends the role with an
                # empty content.
                outcome["deltas"] += bool(choices and choices[0]["delta"].get("content"))
    except (http.client.HTTPException, OSError) as error:
        outcome["error"] = repr(error)
    finally:
        conn.close()


def test_a_redeploy_drains_the_streamed_request_in_flight(host_pool, hosts, inventory):
    """KillMode=mixed: a profile change restarts the server, whose HTTP process finishes the
    request in flight (its schedulers alive until then) before the new one starts."""
    host = hosts[0]
    slow = (
        "--limit",
        host.address,
        "--data",
        'sglang_env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.05"}',
    )
    changed = ("--data", 'sglang_profile_overrides={"mem_fraction_static": 0.8}')
    try:
        first = apply(inventory, options=slow)
        assert first.returncode == 0 and first.changed(host.address) == [SERVE_OP], first.describe()
        old_pid = main_pid(host_pool, host)
        outcome: dict = {}
        stream = threading.Thread(target=streamed_chat, args=(host.address, 1200, outcome))
        stream.start()  # ~60 s of tokens, longer than the re-deploy takes to reach the restart
        result = apply(inventory, options=slow + changed)
        stream.join(300)
        assert result.returncode == 0 and result.changed(host.address) == [SERVE_OP], (
            result.describe()
        )
        assert outcome.get("error") is None and outcome["status"] == 200, outcome
        assert (outcome["deltas"], outcome["done"]) == (1200, True), outcome
        assert main_pid(host_pool, host) != old_pid
        assert record(host_pool, host)["settings"]["mem_fraction_static"] == 0.8
        journal = host_pool.run(host, f"journalctl -u sglang.service _PID={old_pid} -o cat").stdout
        # Real 0.5.17's lines: the request came in before SIGTERM, the exit only after it.
        order = [
            journal.find("POST /v1/chat/completions"),
            journal.find("SIGTERM received. signum=None frame=None. Draining requests"),
            journal.find("Gracefully exiting... Remaining number of requests 0."),
        ]
        assert -1 not in order and order == sorted(order), journal[-2000:]
    finally:
        back = apply(inventory, options=("--limit", host.address))
        assert back.returncode == 0, back.describe()


def router_record(host_pool, test_host) -> dict:
    return json.loads(host_pool.run(test_host, "cat /run/sglang-standin/router-30080.json").stdout)


class ClientLoop:
    """Chat requests through a router, one after another, until stopped: how many were
    served and which failed (status or error)."""

    def __init__(self, url: str):
        self.url, self.served, self.failed = url, 0, []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "France?"}]})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
        while not self.stopped.is_set():
            request = urllib.request.Request(self.url, data=body.encode(), headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    assert "Paris" in json.load(response)["choices"][0]["message"]["content"]
                self.served += 1
            except (OSError, AssertionError, ValueError) as error:
                self.failed.append(repr(error))
            time.sleep(0.05)

    def __enter__(self) -> ClientLoop:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopped.set()
        self.thread.join(60)


def test_a_profile_change_rolls_through_the_replicas_behind_the_router(host_pool, hosts, inventory):
    """Both replicas behind the router: a profile change restarts one, waits for its health,
    then the other; a client going through the router all the while sees no failure."""
    workers = json.dumps([f"http://{h.address}:30000" for h in hosts])
    # A 3 s warm-up, so a restart leaves a replica unable to serve for a while.
    routed = (
        "--data",
        f"sglang_router_worker_urls={workers}",
        "--data",
        'sglang_env={"SGLANG_STANDIN_WARMUP_S": "3"}',
    )
    try:
        first = apply(inventory, options=routed)
        assert first.returncode == 0 and not first.errors(), first.describe()
        router_pid = router_record(host_pool, hosts[0])["pid"]
        with ClientLoop(f"http://{hosts[0].address}:30080/v1/chat/completions") as client:
            time.sleep(1)
            result = apply(
                inventory,
                options=routed
                + ("--data", 'sglang_profile_overrides={"mem_fraction_static": 0.8}'),
            )
            time.sleep(1)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            assert result.changed(h.address) == [SERVE_OP], result.describe()
            assert record(host_pool, h)["settings"]["mem_fraction_static"] == 0.8
        assert client.failed == [] and client.served > 20, (client.served, client.failed[:5])
        # One at a time: the second replica started only once the first was ready.
        spans = sorted(
            (record(host_pool, h)["started_at"], record(host_pool, h)["ready_at"]) for h in hosts
        )
        assert spans[1][0] >= spans[0][1], spans
        assert "its turn behind router" in result.stderr + result.stdout
        assert router_record(host_pool, hosts[0])["pid"] == router_pid  # not restarted
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()


def test_broken_start_rolls_back_to_the_working_version(host_pool, hosts, inventory):
    before = {h.address: record(host_pool, h)["pid"] for h in hosts}
    result = apply(inventory, options=("--data", other_model("broken/model")))
    assert result.returncode != 0, result.describe()
    assert "did not come up" in result.stderr and "rolled back" in result.stderr
    assert "Failed to load model broken/model" in result.stderr  # the journal's tail
    # The tail holds the server's start line (its key with it) masked: no secret reaches
    # the output.
    assert API_KEY not in result.stderr + result.stdout
    assert HF_TOKEN not in result.stderr + result.stdout
    assert "server_args=ServerArgs(model_path='broken/model'" in result.stderr
    assert "api_key='********'" in result.stderr
    for h in hosts:
        # Every host failed, so pyinfra ends with "No hosts remaining" and no JSON report.
        assert any(
            h.address in line and "did not come up" in line for line in result.stderr.splitlines()
        )
        unit = host_pool.run(h, "cat /etc/systemd/system/sglang.service").stdout
        assert "broken/model" not in unit and "Qwen/Qwen3-8B" in unit
        assert record(host_pool, h)["pid"] != before[h.address]  # the old version, restarted
        staged = [
            name
            for name in host_pool.run(h, "ls -A /etc/sglang").stdout.split()
            if name.endswith((".new", ".last-good", ".absent"))
        ]
        assert staged == []
        assert "Paris" in chat(h.address, "What is the capital of France?")
    again = apply(inventory)
    again.assert_unchanged()


def test_a_failed_run_that_removed_the_router_puts_it_back(host_pool, hosts, inventory):
    """The router's files are kept before a run removes them: when that run's server does not
    come up, the router comes back with the previous version, enabled and serving."""
    workers = json.dumps([f"http://{h.address}:30000" for h in hosts])
    host = hosts[0]
    try:
        routed = apply(
            inventory,
            options=("--limit", host.address, "--data", f"sglang_router_worker_urls={workers}"),
        )
        assert routed.returncode == 0 and not routed.errors(), routed.describe()
        failed = apply(
            inventory,
            options=(
                "--limit",
                host.address,
                "--data",
                other_model("broken/model"),
            ),
        )
        assert failed.returncode != 0 and "rolled back" in failed.stderr, failed.describe()
        # It ends with its message, not with pyinfra's "Unexpected error" and a traceback of
        # the role (the journal's tail holds the server's own traceback: that one is meant).
        assert "Unexpected error in Python callback" not in failed.stderr
        assert "roles/sglang_service.py" not in failed.stderr
        states = host_pool.run(
            host, "systemctl is-active sglang-router; systemctl is-enabled sglang-router"
        ).stdout.split()
        assert states == ["active", "enabled"]
        kept = host_pool.run(
            host,
            "ls -A /etc/sglang /etc/systemd/system | grep -E '[.](last-good|absent|new)$'",
            check=False,
        ).stdout
        assert kept == ""
    finally:
        back = apply(inventory, options=("--limit", host.address))
        assert back.returncode == 0 and not back.errors(), back.describe()


def test_a_profile_these_gpus_cannot_run_is_refused_before_any_change(host_pool, hosts, inventory):
    before = {h.address: record(host_pool, h)["pid"] for h in hosts}
    result = apply(inventory, options=("--data", "sglang_model_profile=glm-5-nvfp4"))
    assert result.returncode != 0 and not result.executed, result.describe()
    assert "sm_90" in result.stderr and "glm-5-nvfp4" in result.stderr
    assert {h.address: record(host_pool, h)["pid"] for h in hosts} == before


def test_router_in_front_of_the_replicas_then_removed(host_pool, hosts, inventory):
    workers = json.dumps([f"http://{h.address}:30000" for h in hosts])
    try:
        result = apply(inventory, options=("--data", f"sglang_router_worker_urls={workers}"))
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            # The pinned router may be in the venv already (an earlier test installed it).
            changed = result.changed(h.address)
            assert changed in ([ROUTER_INSTALL_OP, SERVE_OP], [SERVE_OP]), changed
            installed = host_pool.run(h, f"ls {VENV}/lib/python3*/site-packages").stdout
            assert "smg-1.13.0.dist-info" in installed.split()
            unit = host_pool.run(h, "cat /etc/systemd/system/sglang-router.service").stdout
            assert f"ExecStart={VENV}/bin/smg launch " in unit
            # The unit waits out the gateway's shutdown grace (180 s) before it kills it.
            assert "\nTimeoutStopSec=210\n" in unit
            assert (
                host_pool.run(h, "systemctl is-active sglang-router.service").stdout.strip()
                == "active"
            )
        routed = urllib.request.Request(
            f"http://{hosts[0].address}:30080/v1/chat/completions",
            data=json.dumps(
                {"model": "x", "messages": [{"role": "user", "content": "France?"}]}
            ).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        with urllib.request.urlopen(routed, timeout=30) as response:
            assert "Paris" in json.load(response)["choices"][0]["message"]["content"]
        again = apply(inventory, options=("--data", f"sglang_router_worker_urls={workers}"))
        again.assert_unchanged()
    finally:
        removed = apply(inventory)
        assert removed.returncode == 0 and not removed.errors(), removed.describe()
    for h in hosts:
        assert (
            host_pool.run(
                h, "test -e /etc/systemd/system/sglang-router.service", check=False
            ).returncode
            == 1
        )
        assert (
            host_pool.run(
                h, "systemctl is-active sglang-router.service", check=False
            ).stdout.strip()
            != "active"
        )
    apply(inventory).assert_unchanged()
