"""host_config validates an inventory once and keeps the result only as long as the
inventory object lives: keyed by id(), a freed inventory's id went to the next inventory,
which then got the old one's configs."""

from __future__ import annotations

import gc

from pyinfra.api import Inventory

from pyinfra_sglang.inventory import host_config, loading


def one_host(port: int) -> Inventory:
    return Inventory((["gpu-1"], {"sglang_model_profile": "dense-bf16", "sglang_port": port}))


def test_each_inventory_gets_its_own_configs():
    first, second = one_host(30000), one_host(31000)
    assert host_config(first.get_host("gpu-1")).sglang_port == 30000
    assert host_config(second.get_host("gpu-1")).sglang_port == 31000


def test_a_freed_inventory_leaves_no_cached_configs():
    gc.collect()  # other tests' freed inventories go first
    inventory = one_host(30000)
    assert host_config(inventory.get_host("gpu-1")).sglang_port == 30000
    assert inventory in loading._validated
    before = len(loading._validated)
    del inventory
    gc.collect()
    assert len(loading._validated) == before - 1
    # Whatever id the next inventory gets, it is validated afresh.
    assert host_config(one_host(32000).get_host("gpu-1")).sglang_port == 32000
