"""Apply only the Fabric Manager role (tests/integration/test_fabric_on_hosts.py): the hosts
carry the driver already (deploy/site.py's first apply); a capture switched to another GPU
board would make the rest of the site change the service. Validation runs first, as in
deploy/site.py."""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.fabric_manager import fabric_manager

host_config(host)
fabric_manager()
