"""SGLang's multi-node mode across the two site test hosts (one group): tensor parallelism
over both, the first host the rendezvous point and the only one serving HTTP; then audited
and benchmarked, and back to two single-node replicas."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

API_KEY = "sk-site-APIKEY-0123456789"
# The site inventory's group. Its hosts share this machine's network namespace, where a
# firewall would be this machine's: the firewall is tested on private-network hosts
# (test_multinode_firewall_on_hosts.py).
MULTINODE = (
    "--data",
    "sglang_multinode_group=gpu_hosts",
    "--data",
    "sglang_multinode_firewall=false",
)


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
        assert apply(inventory, options=MULTINODE).changed() == []

        # The audit asks the decode question of the head only; both units must run.
        reports = tmp_path / "audit"
        audited = apply(
            inventory,
            "deploy/audit.py",
            options=(*MULTINODE, "--data", f"audit_report_dir={reports}"),
        )
        assert audited.logged_changes() == [], audited.describe()
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
    assert apply(inventory).changed() == []
