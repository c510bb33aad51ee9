"""Multi-node firewall: on each member of a multi-node group, an nftables table that admits
only the group's members to the rendezvous, ZMQ and NCCL ports, with the kernel's ephemeral
port range (where NCCL, Gloo and torch listen) pinned so the table covers it. A host that
leaves its group, or turns the firewall off, gets all of it removed."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server

from pyinfra_sglang import data
from pyinfra_sglang.data_models import MultinodeFirewall
from pyinfra_sglang.inventory import HostConfig, host_config, multinode_member_addresses
from pyinfra_sglang.network.multinode_firewall import firewall_plan
from pyinfra_sglang.paths import template
from pyinfra_sglang.serving.service_files import UNIT_NAME
from roles.nft_table import rules_folder, table_loaded, table_removed


def _install(config: HostConfig, conf: MultinodeFirewall) -> None:
    plan = firewall_plan(
        config.sglang_multinode_group,
        multinode_member_addresses(config, host),
        config.sglang_dist_init_port,
    )
    rules_folder(conf.rules_path)
    low, high = plan.ephemeral_ports
    sysctl = files.template(
        name="Pin the ephemeral port range NCCL listens in",
        src=template("sglang-multinode-sysctl.conf.j2"),
        dest=conf.sysctl_path,
        low=low,
        high=high,
        rules_path=conf.rules_path,
        user="root",
        group="root",
        mode="644",
    )
    server.shell(
        name="Apply the ephemeral port range",
        commands=[f"sysctl -q -p {shlex.quote(conf.sysctl_path)}"],
        _if=sysctl.did_change,
    )
    rules = files.template(
        name=f"Admit only group {plan.group} to its ports",
        src=template("sglang-firewall.nft.j2"),
        dest=conf.rules_path,
        plan=plan,
        user="root",
        group="root",
        mode="600",
    )
    unit = files.template(
        name="Unit that loads the firewall at boot",
        src=template("sglang-firewall.service.j2"),
        dest=conf.unit_path,
        service_unit=UNIT_NAME,
        rules_path=conf.rules_path,
        table=conf.table,
        user="root",
        group="root",
        mode="644",
    )
    table_loaded("multi-node firewall", conf.unit_name, conf.rules_path, rules, unit)


def _remove(conf: MultinodeFirewall) -> None:
    table_removed(
        "multi-node firewall",
        conf.table,
        conf.unit_name,
        conf.unit_path,
        {
            "Remove the firewall's rules": conf.rules_path,
            "Remove the ephemeral port range pin": conf.sysctl_path,
        },
    )


@deploy("Multi-node firewall")
def multinode_firewall() -> None:
    """Admit only a multi-node group's members to its ports, with nftables.

    On each member: the kernel's ephemeral port range pinned, and an nftables table, loaded at
    boot, that drops new connections from outside the group to the rendezvous port range and
    the ephemeral range. A host outside a group gets all of it removed.

    + sglang_multinode_group: the group; unset removes the firewall
    + sglang_multinode_firewall: off removes it
    + sglang_dist_init_port: the rendezvous port its range starts from
    """
    config = host_config(host)
    conf = data.multinode_firewall()
    if config.sglang_multinode_group and config.sglang_multinode_firewall:
        _install(config, conf)
    else:
        _remove(conf)
