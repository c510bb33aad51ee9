"""The multi-node firewall on three test hosts of a private network, each in its own network
namespace: two form a group, the third is a stranger on the same network. Only members may
open connections to the group's ports; clients still reach the serving port; the table comes
back after a reboot and goes away when the host leaves its group."""

from __future__ import annotations

import shlex
import time

import pytest

from pyinfra_sglang.network.seed_firewall import seed_firewall_plan, seed_firewall_rules
from tests.hosts.apply import apply, write_inventory

pytestmark = pytest.mark.hosts

DEPLOY = "tests/hosts/deploys/multinode_firewall.py"
RENDEZVOUS = 50000  # sglang_dist_init_port's default
NCCL_LIKE = 45000  # a port in the pinned ephemeral range, where NCCL's listeners land
SERVING = 30000  # sglang_port's default: clients must still reach it
TABLE = "inet sglang_multinode"

# Listens on the given ports and accepts forever: a stand-in for SGLang's and NCCL's listeners.
LISTENER = (
    "import socket, sys, threading\n"
    "def serve(port):\n"
    "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "    s.bind(('0.0.0.0', port)); s.listen()\n"
    "    while True: s.accept()[0].close()\n"
    "threads = [threading.Thread(target=serve, args=(int(p),)) for p in sys.argv[1:]]\n"
    "[t.start() for t in threads]\n"
)


def listen(pool, test_host, *ports: int) -> None:
    pool.run(test_host, f"cat > /root/listener.py <<'EOF'\n{LISTENER}EOF")
    pool.run(
        test_host,
        "systemd-run --unit=test-listener --property=Restart=always "
        f"python3 /root/listener.py {' '.join(map(str, ports))}",
    )
    # Ready once the host itself can connect to every port (up to 10 s).
    probe = (
        "import socket, sys, time\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        for p in sys.argv[1:]:\n"
        "            socket.create_connection(('127.0.0.1', int(p)), 1).close()\n"
        "        sys.exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.2)\n"
        "sys.exit(1)\n"
    )
    pool.run(test_host, f"python3 -c {shlex.quote(probe)} {' '.join(map(str, ports))}")


def connects(pool, source, target, port: int) -> bool:
    """Can ``source`` open a TCP connection to ``target``:``port`` (2 s to answer)?"""
    probe = (
        "import socket\n"
        f"socket.create_connection(({target.address!r}, {port}), timeout=2).close()\n"
    )
    return pool.run(source, f"python3 -c {shlex.quote(probe)}", check=False).returncode == 0


def reachability(pool, member, stranger, head) -> dict[str, bool]:
    return {
        "member->rendezvous": connects(pool, member, head, RENDEZVOUS),
        "member->nccl": connects(pool, member, head, NCCL_LIKE),
        "stranger->rendezvous": connects(pool, stranger, head, RENDEZVOUS),
        "stranger->nccl": connects(pool, stranger, head, NCCL_LIKE),
        "stranger->serving": connects(pool, stranger, head, SERVING),
        # The head's own outgoing connection: its replies arrive on an ephemeral port.
        "head->stranger": connects(pool, head, stranger, SERVING),
    }


OPEN = dict.fromkeys(
    (
        "member->rendezvous",
        "member->nccl",
        "stranger->rendezvous",
        "stranger->nccl",
        "stranger->serving",
        "head->stranger",
    ),
    True,
)


def reboot(pool, test_host) -> None:
    boots = test_host.boots
    pool.run(test_host, "systemctl reboot", check=False)
    deadline = time.monotonic() + 90
    while test_host.boots == boots and time.monotonic() < deadline:
        time.sleep(0.5)
    assert test_host.boots == boots + 1, f"{test_host.name} did not come back from its reboot"
    pool._wait_for_ssh(test_host)


def test_only_members_reach_the_group_ports(private_pool, tmp_path):
    head, member, stranger = private_pool.boot(3)
    listen(private_pool, head, RENDEZVOUS, NCCL_LIKE, SERVING)
    listen(private_pool, stranger, SERVING)
    assert reachability(private_pool, member, stranger, head) == OPEN  # before: all open

    # A profile without attention heads set: a group of three nodes is one tensor-parallel
    # rank each, which GLM-5's 64 heads (the default profile) cannot be split over.
    data = {
        **private_pool.inventory_data(),
        "sglang_multinode_group": "group",
        "sglang_model_profile": "dense-bf16",
    }
    grouped = write_inventory(
        tmp_path / "grouped.py", {"group": [(h.address, data) for h in (head, member)]}
    )
    first = apply(grouped, DEPLOY)
    assert first.returncode == 0 and not first.errors(), first.describe()
    closed = {**OPEN, "stranger->rendezvous": False, "stranger->nccl": False}
    assert reachability(private_pool, member, stranger, head) == closed
    assert reachability(private_pool, head, stranger, member)["stranger->rendezvous"] is False
    # The rules name the members, the pinned range is in force.
    ruleset = private_pool.run(head, f"nft list table {TABLE}").stdout
    assert f"{head.address}, {member.address}" in ruleset and stranger.address not in ruleset
    assert private_pool.run(head, "sysctl -n net.ipv4.ip_local_port_range").stdout.split() == [
        "32768",
        "60999",
    ]
    second = apply(grouped, DEPLOY)
    second.assert_unchanged()

    # At boot the unit loads the table before the network is up.
    reboot(private_pool, head)
    listen(private_pool, head, RENDEZVOUS, NCCL_LIKE, SERVING)
    assert private_pool.run(head, "systemctl is-active sglang-firewall").stdout.strip() == "active"
    assert reachability(private_pool, member, stranger, head) == closed

    # A new member is admitted by a reload of the rules, on the hosts already in the group.
    everyone = write_inventory(
        tmp_path / "everyone.py",
        {"group": [(h.address, data) for h in (head, member, stranger)]},
    )
    joined = apply(everyone, DEPLOY)
    assert joined.returncode == 0 and not joined.errors(), joined.describe()
    assert "Multi-node firewall | Load the changed rules" in joined.changed(head.address)
    assert connects(private_pool, stranger, head, RENDEZVOUS)
    shut_out = apply(grouped, DEPLOY)  # and shut out again
    assert shut_out.returncode == 0 and not shut_out.errors(), (
        shut_out.describe()
        + private_pool.run(
            head, "journalctl -u sglang-firewall --no-pager | tail -20", check=False
        ).stdout
    )
    assert not connects(private_pool, stranger, head, RENDEZVOUS), private_pool.run(
        head, f"nft list table {TABLE}; journalctl -u sglang-firewall --no-pager | tail -20"
    ).stdout

    # Leaving the group takes the table, its unit and the pin away.
    alone = write_inventory(
        tmp_path / "alone.py",
        {"hosts": [(h.address, private_pool.inventory_data()) for h in (head, member)]},
    )
    left = apply(alone, DEPLOY)
    assert left.returncode == 0 and not left.errors(), left.describe()
    assert private_pool.run(head, f"nft list table {TABLE}", check=False).returncode != 0, (
        left.describe()
        + private_pool.run(
            head, "journalctl -u sglang-firewall --no-pager | tail -20", check=False
        ).stdout
    )
    gone = private_pool.run(
        head,
        "ls /etc/systemd/system/sglang-firewall.service /etc/sglang-firewall/multinode.nft "
        "/etc/sysctl.d/60-sglang-multinode.conf",
        check=False,
    )
    assert gone.returncode != 0 and not gone.stdout.strip(), gone
    assert reachability(private_pool, member, stranger, head) == OPEN
    again = apply(alone, DEPLOY)
    again.assert_unchanged()


def test_each_member_bootstraps_over_the_interface_it_routes_to_the_others_through(
    private_pool, tmp_path
):
    # Each host in its own network namespace: the route to the other member leaves through
    # the interface holding its private address, never loopback.
    head, member = private_pool.boot(2)
    data = {
        **private_pool.inventory_data(),
        "sglang_multinode_group": "group",
        "sglang_model_profile": "dense-bf16",
    }
    grouped = write_inventory(
        tmp_path / "grouped.py", {"group": [(h.address, data) for h in (head, member)]}
    )
    first = apply(grouped, "tests/hosts/deploys/group_interface.py")
    assert first.returncode == 0 and not first.errors(), first.describe()
    for test_host in (head, member):
        holder = private_pool.run(
            test_host, f"ip -o -4 addr show to {test_host.address} | awk '{{print $2}}'"
        ).stdout.strip()
        assert holder and holder != "lo"
        found = private_pool.run(test_host, "cat /root/group-interface").stdout.strip()
        assert found == holder
    apply(grouped, "tests/hosts/deploys/group_interface.py").assert_unchanged()


def test_the_model_seeds_rules_admit_the_copying_host_and_drop_a_stranger(private_pool):
    """The rules roles/model_site.py loads while a seed serves its snapshot
    (model_fetch_once): the copying host reaches the seed's port, a stranger that reached it
    before no longer does, and the seed's other ports stay open to it."""
    seed, copying, stranger = private_pool.boot(3)
    port = 30091
    listen(private_pool, seed, port, SERVING)
    assert connects(private_pool, stranger, seed, port)
    rules = seed_firewall_rules(seed_firewall_plan(port, [copying.address]))
    private_pool.run(seed, f"printf '%s' {shlex.quote(rules)} | nft -f -")
    assert connects(private_pool, copying, seed, port)
    assert not connects(private_pool, stranger, seed, port)
    assert connects(private_pool, stranger, seed, SERVING)
    counted = private_pool.run(seed, "nft list table inet pyinfra_sglang_model_seed").stdout
    assert f"tcp dport {port} ct state new counter packets 0 " not in counted, counted
    # Loaded again (a crashed run's table left behind): replaced, not doubled.
    private_pool.run(seed, f"printf '%s' {shlex.quote(rules)} | nft -f -")
    listed = private_pool.run(seed, "nft list table inet pyinfra_sglang_model_seed").stdout
    assert listed.count("ct state new counter") == 1, listed
