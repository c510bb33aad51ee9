"""The configuration of a host: ``HostConfig``, every value pyinfra-sglang reads from host
and group data, as one field group per role (fields/), composed in host_config.py.

It sits low, under serving and monitoring, which read it; loading an inventory and
validating it (which renders the service) sit above them, in inventory/.

- types.py: the types and helpers every group shares (how to add a field);
- fields/: driver, service, model_download, python_env, multinode, router, watchdog,
  monitoring, bench, audit;
- host_config.py: ``HostConfig``, the rules across groups, ``field_allowed``, ``ab_side_b``;
- releases_read.py: the SGLang releases the data files were read for;
- reference.py: docs/inventory.md's reference, one table per group (`inventory-reference`).
"""

from pyinfra_sglang.config.fields.python_env import versioned_venv_path
from pyinfra_sglang.config.host_config import (
    FIELD_GROUPS,
    USER_KEY_PREFIX,
    HostConfig,
    ab_side_b,
    field_allowed,
)

__all__ = [
    "FIELD_GROUPS",
    "USER_KEY_PREFIX",
    "HostConfig",
    "ab_side_b",
    "field_allowed",
    "versioned_venv_path",
]
