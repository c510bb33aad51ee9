"""Provision and serve: `uv run pyinfra INVENTORY deploy/site.py`.

Every host's inventory data is validated first; bad data stops the run before any host is
changed. Roles follow in dependency order.
"""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.base import base

host_config(host)

base()
