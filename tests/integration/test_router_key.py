"""SGLang's router with its own API key on a real Debian 12 test host (the gateway pinned for
the inventory's SGLang: smg, tests/hosts/standins/smg, whose gateway is the sglang-router
stand-in under smg's console script): the key reaches the router through its 0600 environment
file and an in-process launcher, never its command line; clients need it; the router
presents it to the workers; its metrics listen on loopback; removing the router removes the
key file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.hosts.apply import apply

pytestmark = pytest.mark.hosts

API_KEY = "sk-site-APIKEY-0123456789"  # tests/conftest.py's site_secrets: the workers' key
ENV_FILE = "/etc/sglang/sglang-router.env"


def routed_chat(address: str, key: str | None) -> str:
    request = urllib.request.Request(
        f"http://{address}:30080/v1/chat/completions",
        data=json.dumps(
            {"model": "x", "messages": [{"role": "user", "content": "France?"}]}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def test_router_key_stays_off_the_command_line(host_pool, hosts, inventory, site_secrets):
    head = hosts[0]
    workers = json.dumps([f"http://{h.address}:30000" for h in hosts])
    options = (
        "--limit",
        head.address,
        "--data",
        f"sglang_router_worker_urls={workers}",
        # The workers' key: the router presents its key to them.
        "--data",
        f"sglang_router_api_key_file={site_secrets / 'api-key'}",
    )
    run = lambda command: host_pool.run(head, command).stdout  # noqa: E731
    try:
        result = apply(inventory, options=options)
        assert result.returncode == 0 and not result.errors(), result.describe()
        assert API_KEY not in result.stdout + result.stderr
        assert run("systemctl is-active sglang-router.service").strip() == "active"
        assert run(f"stat -c '%a %U' {ENV_FILE}").split() == ["600", "root"]
        pid = run("systemctl show -p MainPID --value sglang-router.service").strip()
        assert API_KEY not in run(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert API_KEY not in run("cat /etc/systemd/system/sglang-router.service")
        standin = json.loads(run("cat /run/sglang-standin/router-30080.json"))
        assert (standin["standin"], standin["version"]) == ("smg", "1.13.0")
        assert standin["api_key_set"] is True and standin["argv"][-1] == "********"
        # `python -c LAUNCHER launch ...`: smg's main() as `python -m smg` runs it.
        assert "runpy.run_module('smg'" in run(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert standin["prometheus_host"] == head.address  # loopback: the router's own
        with pytest.raises(urllib.error.HTTPError, match="401"):
            routed_chat(head.address, None)
        assert "Paris" in routed_chat(head.address, API_KEY)
        with urllib.request.urlopen(f"http://{head.address}:29000/metrics", timeout=30) as metrics:
            assert b"requests_total" in metrics.read()
        again = apply(inventory, options=options)
        again.assert_unchanged()
    finally:
        removed = apply(inventory)
        assert removed.returncode == 0 and not removed.errors(), removed.describe()
    assert host_pool.run(head, f"test -e {ENV_FILE}", check=False).returncode == 1
    apply(inventory).assert_unchanged()


def test_worker_logins_stay_off_the_command_line_and_the_unit(host_pool, hosts, inventory):
    """Issue 35 N4: a worker URL's password reached the router's argv and its 0644 unit. With
    a login, the URLs go through the 0600 environment file and the launcher; a second apply
    changes nothing."""
    head = hosts[0]
    password = "w0rker-Pa55word"
    workers = json.dumps([f"http://router:{password}@{h.address}:30000" for h in hosts])
    options = ("--limit", head.address, "--data", f"sglang_router_worker_urls={workers}")
    run = lambda command: host_pool.run(head, command).stdout  # noqa: E731
    try:
        result = apply(inventory, options=options)
        assert result.returncode == 0 and not result.errors(), result.describe()
        assert password not in result.stdout + result.stderr
        assert run("systemctl is-active sglang-router.service").strip() == "active"
        assert run(f"stat -c '%a %U' {ENV_FILE}").split() == ["600", "root"]
        assert password in run(f"cat {ENV_FILE}")
        pid = run("systemctl show -p MainPID --value sglang-router.service").strip()
        assert password not in run(f"tr '\\0' ' ' < /proc/{pid}/cmdline")
        assert password not in run("cat /etc/systemd/system/sglang-router.service")
        # The gateway got the URLs in-process, from the launcher.
        standin = json.loads(run("cat /run/sglang-standin/router-30080.json"))
        assert standin["worker_urls"] == json.loads(workers), standin
        again = apply(inventory, options=options)
        again.assert_unchanged()
    finally:
        removed = apply(inventory)
        assert removed.returncode == 0 and not removed.errors(), removed.describe()
    assert host_pool.run(head, f"test -e {ENV_FILE}", check=False).returncode == 1
