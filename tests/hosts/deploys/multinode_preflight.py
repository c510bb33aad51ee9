"""Apply the multi-node firewall and the all-reduce preflight only
(tests/integration/test_multinode_preflight_on_hosts.py): its hosts sit on a private network
that cannot reach the stand-in package repositories the rest of deploy/site.py needs; their
venv with a real torch is made by the test. Validation and the transfer folder come first,
as in deploy/site.py."""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.multinode_firewall import multinode_firewall
from roles.multinode_preflight import multinode_preflight
from roles.transfers import transfer_folder

host_config(host)
transfer_folder()
multinode_firewall()
multinode_preflight()
