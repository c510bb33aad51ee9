"""SGLang's multi-node mode across the two site test hosts (one group): tensor parallelism
over both, the first host the rendezvous point and the only one serving HTTP; then audited
and benchmarked, and back to two single-node replicas. Each node of the group downloads the
model itself and serves it offline."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.hosts.apply import apply
from tests.hosts.audit_report import assert_audit_changed_nothing
from tests.hosts.hubstandin import LFS_THRESHOLD
from tests.hosts.site_model import SITE_MODEL, SITE_MODEL_COMMIT, model_files

pytestmark = pytest.mark.hosts

API_KEY = "sk-site-APIKEY-0123456789"
# The site inventory's group. Its hosts share this machine's network namespace, where a
# firewall would be this machine's: the firewall is tested on private-network hosts
# (test_multinode_firewall_on_hosts.py). Their venv's torch is the stand-in: the all-reduce
# preflight, which needs a real torch, has its own test (test_multinode_preflight_on_hosts.py).
MULTINODE = (
    "--data",
    "sglang_multinode_group=gpu_hosts",
    "--data",
    "sglang_multinode_firewall=false",
    "--data",
    "sglang_multinode_preflight=false",
)


def unit_state(host_pool, test_host) -> str:
    show = "systemctl show -p ActiveState --value sglang.service"
    return host_pool.run(test_host, show).stdout.strip()


def journal_since(host_pool, test_host, since: str) -> str:
    command = f"journalctl -u sglang.service --since @{since} --no-pager -o cat"
    return host_pool.run(test_host, command).stdout


def argv_of(host_pool, test_host) -> list[str]:
    return json.loads(host_pool.run(test_host, "cat /run/sglang-standin/30000.json").stdout)["argv"]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_two_hosts_serve_one_model_then_go_back_to_replicas(host_pool, hosts, inventory, tmp_path):
    head, worker = hosts
    try:
        result = apply(inventory, options=MULTINODE)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for rank, h in enumerate(hosts):
            argv = argv_of(host_pool, h)
            # Two replayed H200s per host, tensor parallelism over both hosts.
            assert (flag(argv, "--tp-size"), flag(argv, "--nnodes"), flag(argv, "--node-rank")) == (
                "4",
                "2",
                str(rank),
            )
            assert flag(argv, "--dist-init-addr").startswith(f"{head.address}:")
        assert (
            json.loads(host_pool.run(worker, "cat /run/sglang-standin/30000.json").stdout)["state"]
            == "joined"
        )
        request = urllib.request.Request(
            f"http://{head.address}:30000/v1/chat/completions",
            data=json.dumps(
                {"model": "x", "messages": [{"role": "user", "content": "France?"}]}
            ).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert "Paris" in json.load(response)["choices"][0]["message"]["content"]
        apply(inventory, options=MULTINODE).assert_unchanged()

        # The audit asks the decode question of the head only; both units must run.
        reports = tmp_path / "audit"
        audited = apply(
            inventory,
            "deploy/audit.py",
            options=(*MULTINODE, "--data", f"audit_report_dir={reports}"),
        )
        assert_audit_changed_nothing(audited, reports)
        codes = {
            h.address: {
                f["code"]: f["level"]
                for f in json.loads((reports / f"{h.address}.json").read_text())["findings"]
            }
            for h in hosts
        }
        assert (
            codes[head.address]["decode-sanity"] == "ok"
            and "decode-sanity" not in codes[worker.address]
        )
        assert codes[head.address]["service"] == codes[worker.address]["service"] == "ok"
        assert codes[head.address]["unit"] == codes[worker.address]["unit"] == "ok"

        # The benchmark runs against the head; the worker has nothing to serve it.
        results = tmp_path / "bench"
        benched = apply(
            inventory,
            "deploy/bench.py",
            options=(
                *MULTINODE,
                "--data",
                f"bench_results_dir={results}",
                "--data",
                "bench_concurrencies=[2]",
                "--data",
                "bench_output_len=8",
            ),
        )
        assert benched.returncode == 0, benched.describe()
        assert (results / head.address).is_dir() and not (results / worker.address).exists()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    for h in hosts:
        argv = argv_of(host_pool, h)
        assert flag(argv, "--tp-size") == "2" and "--nnodes" not in argv
    apply(inventory).assert_unchanged()


def test_each_node_of_a_group_downloads_the_snapshot_and_serves_it_offline(
    host_pool, hosts, inventory
):
    cache = "/var/lib/sglang/huggingface/hub/models--Qwen--Qwen3-8B"
    download = f"Model weights | Download {SITE_MODEL} at {SITE_MODEL_COMMIT[:12]}"
    expected = model_files(LFS_THRESHOLD + 1024 * 1024)
    for h in hosts:
        host_pool.run(h, f"rm -rf {cache}")  # as on hosts that never had the model
    try:
        result = apply(inventory, options=MULTINODE)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for rank, h in enumerate(hosts):
            assert download in result.changed(h.address)
            snapshot = h.root / cache.lstrip("/") / "snapshots" / SITE_MODEL_COMMIT
            assert {p.name: p.stat().st_size for p in snapshot.iterdir()} == {
                name: len(content) for name, content in expected.items()
            }
            assert (snapshot / "model.safetensors").read_bytes() == expected["model.safetensors"]
            # Each node's server reads that snapshot, never the Hub: the pinned commit on its
            # command line, the Hub client offline in its environment.
            argv = argv_of(host_pool, h)
            assert (flag(argv, "--node-rank"), flag(argv, "--revision")) == (
                str(rank),
                SITE_MODEL_COMMIT,
            )
            env = host_pool.run(h, "cat /etc/sglang/sglang.env").stdout.splitlines()
            assert "HF_HUB_OFFLINE=1" in env
        again = apply(inventory, options=MULTINODE)
        again.assert_unchanged()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()


def test_from_0_5_21_the_group_restarts_rank0_first_never_into_the_kill_timeout(
    host_pool, hosts, inventory
):
    """The stand-in reports 0.5.23: as SGLang from 0.5.21, its rank 1 ignores SIGTERM and
    waits for rank 0's shutdown broadcast. A change to the whole group restarts rank 0 first
    and ends in seconds; the old order (rank 1 stopped on its own, or ahead of rank 0) waits
    for the unit's kill timeout (TimeoutStopSec=120)."""
    head, worker = hosts
    try:
        up = apply(inventory, options=MULTINODE)
        assert up.returncode == 0 and not up.errors(), up.describe()
        assert (
            json.loads(host_pool.run(worker, "cat /run/sglang-standin/30000.json").stdout)[
                "version"
            ]
            == "0.5.23"
        )

        since = host_pool.run(worker, "date +%s").stdout.strip()
        started = time.monotonic()
        changed = apply(
            inventory,
            options=(*MULTINODE, "--data", 'sglang_env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.004"}'),
        )
        took = time.monotonic() - started
        assert changed.returncode == 0 and not changed.errors(), changed.describe()
        journal = journal_since(host_pool, worker, since)
        # Rank 1 exited on rank 0's broadcast, not on systemd's SIGKILL.
        assert "ShutdownReq from rank 0; exiting" in journal, journal
        assert "timed out" not in journal and "Killing process" not in journal, journal
        assert took < 120, f"the group's restart took {took:.0f} s"
        assert (
            json.loads(host_pool.run(worker, "cat /run/sglang-standin/30000.json").stdout)["state"]
            == "joined"
        )

        # Only rank 1 changes (the run is limited to it, as a change of its own would be): it
        # restarts its whole group, rank 0 first, and waits for rank 0's health.
        since = host_pool.run(worker, "date +%s").stdout.strip()
        head_pid = json.loads(host_pool.run(head, "cat /run/sglang-standin/30000.json").stdout)[
            "pid"
        ]
        started = time.monotonic()
        alone = apply(
            inventory,
            options=(
                "--limit",
                worker.address,
                *MULTINODE,
                "--data",
                'sglang_env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.003"}',
            ),
        )
        took = time.monotonic() - started
        assert alone.returncode == 0 and not alone.errors(), alone.describe()
        journal = journal_since(host_pool, worker, since)
        assert "ShutdownReq from rank 0; exiting" in journal, journal
        assert "timed out" not in journal and "Killing process" not in journal, journal
        assert took < 120, f"rank 1's restart took {took:.0f} s"
        head_now = json.loads(host_pool.run(head, "cat /run/sglang-standin/30000.json").stdout)
        assert head_now["pid"] != head_pid and head_now["state"] == "ready"
        assert head_now["peers_joined"] == [1]

        # The old order: rank 1 stopped before rank 0 only logs the SIGTERM and waits; only
        # rank 0's stop (or the kill timeout) ends it.
        since = host_pool.run(worker, "date +%s").stdout.strip()
        host_pool.run(worker, "systemctl stop --no-block sglang.service")
        time.sleep(8)
        assert unit_state(host_pool, worker) == "deactivating"
        assert "waiting for the rank-0 ShutdownReq broadcast" in journal_since(
            host_pool, worker, since
        )
        host_pool.run(head, "systemctl stop sglang.service")
        deadline = time.monotonic() + 15
        while unit_state(host_pool, worker) != "inactive":
            assert time.monotonic() < deadline, "rank 1 did not exit on rank 0's broadcast"
            time.sleep(0.5)
        assert "timed out" not in journal_since(host_pool, worker, since)
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
