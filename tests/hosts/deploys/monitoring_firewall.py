"""Apply only the metrics firewall role (tests/integration/test_monitoring_firewall_on_hosts.py):
its hosts sit on a private network that cannot reach the package repositories the rest of
deploy/site.py needs. Validation runs first, as in deploy/site.py."""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.monitoring_firewall import monitoring_firewall

host_config(host)
monitoring_firewall()
