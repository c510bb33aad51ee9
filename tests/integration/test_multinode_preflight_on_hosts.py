"""The multi-node all-reduce preflight on two test hosts of a private network, each in its own
network namespace, behind the group's firewall: a real torch (PyPI's 2.13.0 CPU build, in a
venv the test makes with the host's own Python) all-reduces across them with Gloo at the
group's rendezvous, over the interface each routes to the other through. Then: a second
apply with the servers running changes nothing; a group whose members a firewall keeps apart
fails the run within its timeout, with numbers, instead of hanging."""

from __future__ import annotations

import re
import time

import pytest

from tests.hosts.apply import apply, write_inventory
from tests.hosts.real_torch import install_venv

pytestmark = pytest.mark.hosts

DEPLOY = "tests/hosts/deploys/multinode_preflight.py"
VENV = "/opt/sglang/venvs/preflight-test"
TIMEOUT_S = 20
PASSED = re.compile(
    r"\[(?P<host>[^\]]+)\] multi-node preflight of group: rank (?P<rank>\d) of 2: all-reduce "
    r"of 64 MiB: bus bandwidth (?P<busbw>[\d.]+) GB/s over (?P<interface>\S+), rendezvous in "
    r"[\d.]+ s, sum right"
)


def _inventory(path, pool, hosts):
    data = {
        **pool.inventory_data(),
        "sglang_multinode_group": "group",
        "sglang_model_profile": "dense-bf16",
        "venv_path": VENV,
        "sglang_multinode_preflight_timeout_s": TIMEOUT_S,
    }
    members = [(h.address, data) for h in hosts]
    return write_inventory(path, {"group": members})


def _holder(pool, test_host) -> str:
    command = f"ip -o -4 addr show to {test_host.address} | awk '{{print $2}}'"
    return pool.run(test_host, command).stdout.strip()


def test_the_group_all_reduces_before_it_starts_and_a_blocked_one_fails_in_bounded_time(
    private_pool, tmp_path
):
    head, member = hosts = private_pool.boot(2)
    for test_host in hosts:
        install_venv(test_host.root, VENV)
    inventory = _inventory(tmp_path / "group.py", private_pool, hosts)

    first = apply(inventory, DEPLOY)
    assert first.returncode == 0 and not first.errors(), first.describe()
    passed = {m["host"]: m for m in PASSED.finditer(first.stderr)}
    assert set(passed) == {head.address, member.address}, first.describe()
    for test_host in hosts:
        found = passed[test_host.address]
        assert found["rank"] == str(hosts.index(test_host))
        # Over the interface holding its private address, as the server's env file says.
        assert found["interface"] == _holder(private_pool, test_host) != "lo"
        assert float(found["busbw"]) > 0
    # Judged against the line rate the kernel gives the private link (a veth: 10 Gb/s).
    assert "(line rate 10 Gb/s)" in first.stderr, first.describe()
    print("preflight:", [m.group(0) for m in passed.values()])

    # The group's servers run (a unit of the server's name stands in): nothing to prove.
    for test_host in hosts:
        private_pool.run(test_host, "systemd-run --unit=sglang.service sleep infinity")
    apply(inventory, DEPLOY).assert_unchanged()

    # One member's server stopped: the other still holds the group, no preflight runs.
    private_pool.run(member, "systemctl stop sglang.service")
    partial = apply(inventory, DEPLOY)
    assert partial.returncode == 0, partial.describe()
    assert f"preflight of group not run: the server runs on {head.address}" in partial.stderr

    # The head drops everything from the member but SSH, as a firewall on the path that was
    # never opened for the group would: the rendezvous cannot finish, and both fail within
    # the timeout, with numbers, instead of hanging.
    private_pool.run(head, "systemctl stop sglang.service")
    block = (
        "nft add table inet testblock && nft add chain inet testblock input "
        "'{ type filter hook input priority -10; }' && nft add rule inet testblock input "
        f"ip saddr {member.address} tcp dport != 22 drop"
    )
    private_pool.run(head, block)
    started = time.monotonic()
    failed = apply(inventory, DEPLOY)
    took = time.monotonic() - started
    assert failed.returncode != 0, failed.describe()
    for rank in range(len(hosts)):
        said = f"multi-node preflight of group: rank {rank} of 2: the rendezvous at"
        assert said in failed.stderr, failed.describe()
    assert "1/2 clients joined" in failed.stderr, failed.describe()
    assert took < 3 * TIMEOUT_S + 60, took
    print(
        f"blocked: failed in {took:.0f} s:",
        [line.strip() for line in failed.stderr.splitlines() if "preflight of group" in line],
    )
