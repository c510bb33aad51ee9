"""Record the bootstrap interface a multi-node member derives (checks/host_context.py
group_interface, as the service role renders it into GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME)
in /root/group-interface (tests/integration/test_multinode_firewall_on_hosts.py): its hosts
sit on a private network that cannot reach the stand-in repositories the service needs."""

from io import StringIO

from pyinfra import host
from pyinfra.operations import files

from checks.host_context import group_interface
from pyinfra_sglang.inventory import host_config
from roles.transfers import transfer_folder

config = host_config(host)
transfer_folder()
files.put(
    name="Record the group's bootstrap interface",
    src=StringIO(f"{group_interface(config, host)}\n"),
    dest="/root/group-interface",
)
