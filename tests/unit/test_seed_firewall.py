"""The seed's firewall while it serves its snapshot (model_fetch_once): the plan, its rules,
and the program a copying host tells its address with (roles/model_site.py;
tests/integration/test_model_on_hosts.py loads the rules on a host and connects)."""

from __future__ import annotations

import subprocess
import sys

from pyinfra_sglang.network.seed_firewall import seed_firewall_plan, seed_firewall_rules
from roles.model_site import SOURCE_PROGRAM


def test_copying_hosts_are_split_by_family_sorted_once_and_mapped_ipv4_is_ipv4():
    plan = seed_firewall_plan(8765, ["10.0.0.3", "::ffff:10.0.0.2", "fd00::1", "10.0.0.3"])
    assert plan.copying_ipv4 == ("10.0.0.2", "10.0.0.3")
    assert plan.copying_ipv6 == ("fd00::1",)
    assert plan.admitted() == "10.0.0.2, 10.0.0.3, fd00::1"
    assert seed_firewall_plan(8765, []).admitted() == "no host"


def test_the_rules_drop_new_connections_to_the_port_from_all_but_the_copying_hosts():
    rules = seed_firewall_rules(seed_firewall_plan(8765, ["10.0.0.2"]))
    assert "elements = { 10.0.0.2 }" in rules
    assert "tcp dport 8765 ip saddr @copying_ipv4 accept" in rules
    assert "tcp dport 8765 ct state new counter drop" in rules
    # Only the seed's port: the rest of the host's traffic is not this table's business.
    rule_lines = [line.strip() for line in rules.splitlines()]
    assert rules.count("drop") == 1 and "ip saddr @copying_ipv4 accept" not in rule_lines
    # Replaced atomically (a table a crashed run left is replaced, not added to).
    tables = [line for line in rules.splitlines() if line.startswith(("table", "delete"))]
    assert tables == [
        "table inet pyinfra_sglang_model_seed",
        "delete table inet pyinfra_sglang_model_seed",
        "table inet pyinfra_sglang_model_seed {",
    ]
    assert rules.count("elements") == 1  # an empty family: an empty set
    assert seed_firewall_rules(seed_firewall_plan(8765, ["10.0.0.2"])) == rules


def test_the_source_program_prints_the_address_the_kernel_sends_from():
    found = subprocess.run(
        [sys.executable, "-c", SOURCE_PROGRAM, "127.0.0.1", "8765"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "127.0.0.1"
    refused = subprocess.run(
        [sys.executable, "-c", SOURCE_PROGRAM, "no-such-host.invalid", "8765"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and not refused.stdout.strip()
