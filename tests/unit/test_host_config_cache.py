"""host_config validates an inventory once and keeps the result only as long as the
inventory object lives: keyed by id(), a freed inventory's id went to the next inventory,
which then got the old one's configs."""

from __future__ import annotations

import gc

import gevent
import gevent.thread
from pyinfra.api import Inventory

from pyinfra_sglang.inventory import host_config, loading
from tests.unit.greenlets import join_all


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


def test_hosts_planned_at_once_validate_the_inventory_once(monkeypatch):
    """pyinfra runs the deploy file for every host at once, each in a greenlet, and
    validation yields (ssh-keygen's wait): every host found the cache empty and validated
    the whole inventory, n x n checks. Now the first validates, the others wait for it."""
    names = [f"gpu-{n}" for n in range(6)]
    inventory = Inventory((names, {"sglang_model_profile": "dense-bf16"}))
    validate = loading.validate_inventory
    calls = []

    def validating(inventory):
        calls.append(inventory)
        gevent.sleep(0.01)  # ssh-keygen's wait, under gevent
        return validate(inventory)

    monkeypatch.setattr(loading, "validate_inventory", validating)
    # As the pyinfra CLI has it: threading patched by gevent before the lock is made.
    monkeypatch.setattr(loading.threading, "Lock", gevent.thread.allocate_lock)
    monkeypatch.setattr(loading, "_validating", None)
    greenlets = [gevent.spawn(host_config, inventory.get_host(name)) for name in names]
    join_all(greenlets, raise_error=True)
    assert [greenlet.value.sglang_model_profile for greenlet in greenlets] == ["dense-bf16"] * 6
    assert calls == [inventory]
