"""Apply only the metrics firewall role (tests/integration/test_monitoring_firewall_on_hosts.py):
its hosts sit on a private network that cannot reach the package repositories the rest of
deploy/site.py needs. Validation and the transfer folder come first, as in deploy/site.py."""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.monitoring_firewall import monitoring_firewall
from roles.transfers import transfer_folder

host_config(host)
transfer_folder()
monitoring_firewall()
