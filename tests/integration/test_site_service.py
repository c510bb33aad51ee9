"""deploy/site.py's SGLang service role on real Debian 12 test hosts, serving the stand-in
SGLang server (tests/hosts/standins/sglang): health wait, secrets, GPU upgrade, rollback."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

API_KEY = "sk-site-APIKEY-0123456789"
HF_TOKEN = "hf_site_TOKEN_abcdefghij"
SERVE_OP = "SGLang service | Serve dense-bf16 with SGLang 0.5.23"


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


def test_service_runs_healthy_with_secrets_root_only(host_pool, hosts, inventory, site_first_apply):
    for h in hosts:
        assert SERVE_OP in site_first_apply.changed(h.address)
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
        assert run("stat -c '%a %U' /etc/sglang/sglang.env /etc/sglang/sglang.yaml").split() == [
            "600",
            "root",
            "600",
            "root",
        ]
        unit = run("cat /etc/systemd/system/sglang.service")
        assert API_KEY not in unit and "--api-key" not in unit and HF_TOKEN not in unit
        assert API_KEY not in run(
            "cat /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline | tr '\\0' ' '"
        )
    assert API_KEY not in site_first_apply.stderr + site_first_apply.stdout
    assert HF_TOKEN not in site_first_apply.stderr + site_first_apply.stdout
    with pytest.raises(urllib.error.HTTPError, match="401"):
        chat(hosts[0].address, "What is the capital of France?", key=None)


def test_a_changed_secret_restarts_without_showing_it(host_pool, hosts, inventory, site_secrets):
    key_file = site_secrets / "api-key"
    key_file.write_text("sk-rotated-NEWKEY-987654\n")
    try:
        result = apply(inventory, options=("-vv",))
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            assert result.changed(h.address) == [SERVE_OP]
            assert "Paris" in chat(h.address, "France?", key="sk-rotated-NEWKEY-987654")
        assert "NEWKEY" not in result.stderr + result.stdout and API_KEY not in result.stderr
    finally:
        key_file.write_text(API_KEY + "\n")
        restored = apply(inventory)
        assert restored.returncode == 0, restored.describe()


def test_gpu_upgrade_2_to_8_rerenders_and_restarts_only_the_service(host_pool, hosts, inventory):
    upgraded = hosts[0]
    host_pool.run(
        upgraded,
        "mkdir -p /etc/nvidia-smi-replay "
        "&& echo rtxpro6000x8-pcie-from-smiq > /etc/nvidia-smi-replay/capture",
    )
    try:
        result = apply(inventory)
        assert result.returncode == 0 and not result.errors(), result.describe()
        assert result.changed(upgraded.address) == [SERVE_OP], result.describe()
        assert result.changed(hosts[1].address) == []
        argv = record(host_pool, upgraded)["argv"]
        assert argv[argv.index("--tp-size") + 1] == "8"
        env = host_pool.run(upgraded, "cat /etc/sglang/sglang.env").stdout
        assert "NCCL_P2P_LEVEL=PHB" in env  # eight PCIe GPUs, no NVLink
        again = apply(inventory)
        assert again.changed() == [], again.describe()
    finally:
        host_pool.run(upgraded, "rm -f /etc/nvidia-smi-replay/capture")
        back = apply(inventory)
        assert back.returncode == 0, back.describe()
    argv = record(host_pool, upgraded)["argv"]
    assert argv[argv.index("--tp-size") + 1] == "2"


def test_broken_start_rolls_back_to_the_working_version(host_pool, hosts, inventory):
    before = {h.address: record(host_pool, h)["pid"] for h in hosts}
    result = apply(
        inventory, options=("--data", 'sglang_profile_overrides={"model": "broken/model"}')
    )
    assert result.returncode != 0, result.describe()
    assert "did not come up" in result.stderr and "rolled back" in result.stderr
    assert "Failed to load model broken/model" in result.stderr  # the journal's tail
    for h in hosts:
        # Every host failed, so pyinfra ends with "No hosts remaining" and no JSON report.
        assert any(
            h.address in line and "did not come up" in line for line in result.stderr.splitlines()
        )
        unit = host_pool.run(h, "cat /etc/systemd/system/sglang.service").stdout
        assert "broken/model" not in unit and "Qwen/Qwen3-8B" in unit
        assert record(host_pool, h)["pid"] != before[h.address]  # the old version, restarted
        assert "Paris" in chat(h.address, "What is the capital of France?")
    again = apply(inventory)
    assert again.returncode == 0 and again.changed() == [], again.describe()


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
            assert result.changed(h.address) == [
                "SGLang service | Install SGLang's router",
                SERVE_OP,
            ]
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
        assert again.changed() == [], again.describe()
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
    assert apply(inventory).changed() == []
