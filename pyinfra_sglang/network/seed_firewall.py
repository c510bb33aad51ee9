"""The seed's firewall while it serves its snapshot (model_fetch_once): only the hosts that
copy it may open connections to its port. Pure: roles/model_site.py loads these rules before
the server starts and deletes the table once it stopped."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address

from pyinfra_sglang import data
from pyinfra_sglang.network.multinode_firewall import packet_address
from pyinfra_sglang.templating import render_template


@dataclass(frozen=True)
class SeedFirewallPlan:
    table: str
    port: int
    copying_ipv4: tuple[str, ...]
    copying_ipv6: tuple[str, ...]

    def admitted(self) -> str:
        return ", ".join((*self.copying_ipv4, *self.copying_ipv6)) or "no host"


def seed_firewall_plan(port: int, sources: list[str]) -> SeedFirewallPlan:
    """``sources``: the addresses the copying hosts' packets leave from (IP literals, as
    each host read them from its own route to the seed), sorted, duplicates once."""
    addresses = sorted({packet_address(source) for source in sources}, key=str)
    return SeedFirewallPlan(
        table=data.model().download.seed_table,
        port=port,
        copying_ipv4=tuple(str(a) for a in addresses if isinstance(a, IPv4Address)),
        copying_ipv6=tuple(str(a) for a in addresses if not isinstance(a, IPv4Address)),
    )


def seed_firewall_rules(plan: SeedFirewallPlan) -> str:
    return render_template("model-seed-firewall.nft.j2", plan=plan)
