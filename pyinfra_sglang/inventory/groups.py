"""Where a host stands among the inventory's hosts: the members of its multi-node group,
the address each is reached at, its place in the group. From the inventory alone, no host
contacted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra_sglang.serving.service_files import node_position

if TYPE_CHECKING:
    from pyinfra.api.host import Host

    from pyinfra_sglang.config import HostConfig


def member_address(member: Host) -> str:
    """The address a group member is reached at: its ssh_hostname, else its name."""
    return str(member.data.get("ssh_hostname") or member.name)


def multinode_member_addresses(config: HostConfig, host: Host) -> list[str]:
    """The addresses of the host's multi-node group, in the group's order; [] outside one."""
    if not config.sglang_multinode_group:
        return []
    return [member_address(m) for m in host.inventory.get_group(config.sglang_multinode_group)]


def node_position_in(config: HostConfig, host: Host):
    """The host's place in its multi-node group, from the inventory alone (the group's order;
    the first member's ssh_hostname, else its name, is the rendezvous)."""

    if not config.sglang_multinode_group:
        return node_position(config, host.name, [host.name], None)
    members = [member.name for member in host.inventory.get_group(config.sglang_multinode_group)]
    return node_position(
        config, host.name, members, member_address(host.inventory.get_host(members[0]))
    )
