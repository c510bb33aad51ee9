"""The inventory: every value pyinfra-sglang reads from host and group data, validated before
any host is changed.

The configuration it validates, ``HostConfig``, sits on its own floor below serving
(pyinfra_sglang/config/); the names are handed on here for the roles and checks.

- problems.py: ``Problem`` and ``InventoryError``, what validation reports;
- validation.py: the validation driver, from a host's data or a whole inventory;
- semantic_checks.py: what the service, driver, Secure Boot, network and SSH would refuse
  (renders the service: it sits above render.py, which never imports it);
- masking.py: secrets in host data, masked out of every problem;
- groups.py: multi-node members, their addresses, a host's place in its group;
- rolling.py: the router each server stands behind, for rolling restarts;
- loading.py: inventory files, and each host's validated config (cached per inventory);
- monitoring.py: the inventory's monitoring plan (scrape targets, firewall), from the
  validated configs; monitoring_files.py renders its Prometheus files for promtool.

The names below are the package's public ones; core modules below the inventory (serving,
monitoring, the audit) import ``pyinfra_sglang.config`` instead.
"""

from pyinfra_sglang.config import (
    USER_KEY_PREFIX,
    HostConfig,
    ab_side_b,
    field_allowed,
    versioned_venv_path,
)
from pyinfra_sglang.inventory.groups import (
    member_address,
    multinode_member_addresses,
    node_position_in,
)
from pyinfra_sglang.inventory.loading import InventoryFileError, host_config, load_inventory_file
from pyinfra_sglang.inventory.masking import mask_secrets
from pyinfra_sglang.inventory.problems import InventoryError, Problem
from pyinfra_sglang.inventory.rolling import rolling_group, router_of
from pyinfra_sglang.inventory.validation import (
    pyinfra_data_keys,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.serving.host_profile import host_profile

__all__ = [
    "USER_KEY_PREFIX",
    "HostConfig",
    "InventoryError",
    "InventoryFileError",
    "Problem",
    "ab_side_b",
    "field_allowed",
    "host_config",
    "host_profile",
    "load_inventory_file",
    "mask_secrets",
    "member_address",
    "multinode_member_addresses",
    "node_position_in",
    "pyinfra_data_keys",
    "rolling_group",
    "router_of",
    "validate_host_data",
    "validate_inventory",
    "versioned_venv_path",
]
