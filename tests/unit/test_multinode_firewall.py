"""The multi-node firewall's plan and its rendered rules and unit (roles/multinode_firewall.py
applies them; tests/integration/test_multinode_firewall_on_hosts.py loads them on hosts)."""

from __future__ import annotations

import jinja2

from pyinfra_sglang.network.multinode_firewall import filtered_ports, firewall_plan
from pyinfra_sglang.paths import template


def render(name: str, **values) -> str:
    with open(template(name)) as source:
        return jinja2.Template(source.read(), keep_trailing_newline=True).render(**values)


def test_the_rendezvous_ports_merge_into_the_ephemeral_range_they_fall_in():
    # nftables refuses overlapping intervals in one set.
    assert filtered_ports(50000) == ((32768, 60999),)
    assert filtered_ports(20000) == ((20000, 20063), (32768, 60999))
    assert filtered_ports(32740) == ((32740, 60999),)  # adjacent after the span: one range
    assert filtered_ports(65500) == ((32768, 60999), (65500, 65535))


def test_members_are_split_by_family_sorted_and_unbracketed():
    plan = firewall_plan("pair", ["10.0.0.2", "[fd00::1]", "10.0.0.1", "10.0.0.2"], 20000)
    assert plan.members_ipv4 == ("10.0.0.1", "10.0.0.2")
    assert plan.members_ipv6 == ("fd00::1",)
    assert plan.port_set() == "20000-20063, 32768-60999"


def test_the_rules_admit_members_and_drop_only_new_connections_of_others():
    plan = firewall_plan("pair", ["10.0.0.1", "10.0.0.2"], 50000)
    rules = render("sglang-firewall.nft.j2", plan=plan)
    assert "elements = { 10.0.0.1, 10.0.0.2 }" in rules
    assert "ip saddr @members_ipv4 accept" in rules
    assert "tcp dport { 32768-60999 } ct state new counter drop" in rules
    # Replaced atomically: declared, deleted, then defined, in one file.
    lines = [line for line in rules.splitlines() if line.startswith("table") or "delete" in line]
    assert lines == [
        "table inet sglang_multinode",
        "delete table inet sglang_multinode",
        "table inet sglang_multinode {",
    ]
    # An empty family gets an empty set (no elements line), which nft accepts.
    assert rules.count("elements") == 1
    assert render("sglang-firewall.nft.j2", plan=plan) == rules  # deterministic


def test_the_unit_loads_after_nftables_and_before_the_network_and_sglang():
    unit = render(
        "sglang-firewall.service.j2",
        service_unit="sglang.service",
        rules_path="/etc/sglang-firewall/multinode.nft",
        table="sglang_multinode",
    )
    assert "After=nftables.service" in unit
    assert "Before=network-pre.target shutdown.target sglang.service" in unit
    assert "ExecReload=/usr/sbin/nft -f /etc/sglang-firewall/multinode.nft" in unit
    assert "ExecStop=/usr/sbin/nft delete table inet sglang_multinode" in unit
    # A restart of the firewall must never restart the server: no Requires= from it.
    settings = [line for line in unit.splitlines() if not line.startswith("#")]
    assert not [line for line in settings if line.startswith(("Requires", "RequiredBy"))]


def test_an_ipv4_mapped_member_lands_in_the_ipv4_set():
    """Issue 35 N11: ::ffff:10.20.0.12 went into the IPv6 set, and that member's IPv4 packets
    were dropped."""
    from pyinfra_sglang.network.multinode_firewall import firewall_plan

    plan = firewall_plan("g", ["::ffff:10.20.0.12", "10.20.0.13", "[fd00::1]"], 5000)
    assert plan.members_ipv4 == ("10.20.0.12", "10.20.0.13")
    assert plan.members_ipv6 == ("fd00::1",)
