"""A multi-node group: the hosts that serve one model together, their rendezvous and the
firewall between them (roles/multinode_firewall.py, sglang_service.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool

from pyinfra_sglang.config.types import (
    FieldGroup,
    Port,
    allowed,
    no_bool,
)


class MultinodeFields(FieldGroup):
    """A multi-node group: its members, rendezvous, trust and firewall."""

    sglang_multinode_group: str | None = Field(
        None,
        description=(
            "Inventory group whose hosts serve one model together (`--nnodes`; ranks in the "
            "group's order; the first host is the rendezvous)."
        ),
        json_schema_extra=allowed("the name of a group this host is in, or unset"),
    )

    sglang_dist_init_port: Port = Field(
        50000,
        description="Port of the multi-node rendezvous on the group's first host.",
        json_schema_extra=allowed("1..65535"),
    )

    sglang_multinode_trusted_network: StrictBool = Field(
        False,
        description=(
            "Do the multi-node group's hosts talk over a private, trusted network? SGLang's "
            "inter-node transport deserializes pickles from TCP (sglang#24618) and torch, NCCL "
            "and ZMQ listen on all interfaces: a group with a public address is refused unless "
            "this says the network between them is trusted (a VPN, a firewalled fabric)."
        ),
        json_schema_extra=allowed("true, false"),
    )

    sglang_multinode_firewall: StrictBool = Field(
        True,
        description=(
            "Write an nftables table on each member of the multi-node group that admits only "
            "the group's members to its rendezvous, ZMQ and NCCL ports (the rendezvous port "
            "and the pinned ephemeral range, data/multinode_firewall.toml). Needs each "
            "member's address (ssh_hostname, else its name) as an IP address."
        ),
        json_schema_extra=allowed("true, false"),
    )

    sglang_multinode_interface: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,15}$")] | None = (
        Field(
            None,
            description=(
                "Network interface this member's torch (Gloo) and NCCL bootstrap traffic uses: set "
                "as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (`=NAME`: that interface alone) in "
                "the server's env file. Unset: the interface the host routes to the other members "
                "through (`ip route get`, read at deploy), so that a host with several NICs does "
                "not bootstrap over the wrong one or loopback and hang. `sglang_env` values of "
                "those variables win."
            ),
            json_schema_extra=allowed(
                "an interface name (letters, digits, '_', '.', ':', '-'; at most 15), or unset"
            ),
        )
    )

    sglang_multinode_preflight: StrictBool = Field(
        True,
        description=(
            "Before the group's servers start (none of them running), run an all-reduce across "
            "its members with torch.distributed (Gloo) at the group's rendezvous address and "
            "port, over the interface the servers' env files name: a member that cannot "
            "reach the others, a wrong sum or a bus bandwidth below a fraction of the "
            "interface's line rate fails the run with numbers before the servers load "
            "(data/multinode_preflight.toml)."
        ),
        json_schema_extra=allowed("true, false"),
    )

    sglang_multinode_preflight_timeout_s: Annotated[int, BeforeValidator(no_bool)] = Field(
        120,
        ge=10,
        le=3600,
        description=(
            "Seconds the preflight's rendezvous and each of its all-reduces may take (torch's "
            "process group timeout); the program is killed a little after, never waited on."
        ),
        json_schema_extra=allowed("10..3600"),
    )
