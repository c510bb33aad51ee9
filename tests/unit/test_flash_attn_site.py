"""flash-attn built once a site (roles/flash_attn_site.py): which hosts share a build, who
seeds it, and what the build operation yields on the seed and on a copying host
(tests/integration/test_site_python.py builds once on two test hosts)."""

from __future__ import annotations

import json
from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.hardware import Cpus

from checks.facts import JsonRecord, MemoryInfo, NvidiaGpus, PythonPackages
from pyinfra_sglang.inventory import HostConfig
from roles import flash_attn_site
from roles.flash_attn import flash_attn_built
from roles.flash_attn_site import BuildSite, register, site_key, wheel_from_seed
from tests.unit.ophelper import run_operation

GB = 1024**2  # kB
FACTS = {
    PythonPackages: {},
    NvidiaGpus: [{"index": "0", "name": "NVIDIA H200", "compute_cap": "9.0"}],
    Cpus: 16,
    MemoryInfo: {"total_kb": 70 * GB, "available_kb": 64 * GB},
}
ARGS = {
    "venv": "/opt/sglang/venv",
    "version": "2.8.3",
    "archs_override": None,
    "memory_fraction": 0.75,
    "cuda_home": "/usr/local/cuda-13.1",
    "index_url": "https://pypi.org/simple",
    "site_key": ("key",),
}


def test_hosts_share_a_build_only_with_the_same_venv_release_archs_and_index():
    base = HostConfig(python_version="3.11")
    key = site_key(base, ("90",))
    assert site_key(HostConfig(python_version="3.11"), ("90",)) == key
    assert site_key(base, ("90", "120")) == site_key(base, ("120", "90")) != key
    assert site_key(HostConfig(python_version="3.12"), ("90",)) != key  # another venv
    assert site_key(HostConfig(python_version="3.11", sglang_version="0.5.22"), ("90",)) != key
    assert site_key(HostConfig(python_version="3.11", flash_attn_version="2.8.2"), ("90",)) != key
    other_index = HostConfig(python_version="3.11", pypi_index_url="https://mirror/simple")
    assert site_key(other_index, ("90",)) != key


def test_the_first_host_in_the_inventory_seeds_whatever_order_planning_took():
    state = State(inventory=Inventory((["a", "b", "c", "d"], {})), config=Config())
    key = ("k",)
    # pyinfra may plan the hosts in another order than the inventory's.
    site = register(state, state.inventory.get_host("b"), key, due=True)
    assert site.seed == "b" and site.copying == set()
    register(state, state.inventory.get_host("c"), key, due=False)  # has it: nothing to do
    register(state, state.inventory.get_host("a"), key, due=False)  # keeps a wheel
    register(state, state.inventory.get_host("d"), ("other",), due=True)
    assert site.seed == "a" and site.copying == {"b"}
    assert flash_attn_site.site_of(state, None, ("other",)).seed == "d"


def site_of_members(**members: bool) -> BuildSite:
    """A site whose members (host -> build due) are in this order in the inventory."""
    return BuildSite(order=tuple(members), members=members)


def operation(site: BuildSite | None, facts: dict):
    with patch.object(flash_attn_site, "site_of", return_value=site):
        return run_operation(flash_attn_built, facts, **ARGS)


def test_a_copying_host_installs_the_seeds_wheel_and_builds_nothing():
    site = site_of_members(**{"seed-host": False, "op-test-host": True})
    commands, noops = operation(site, FACTS)
    assert noops == [] and len(commands) == 1
    assert commands[0].startswith("FunctionCommand(_installed_from_seed, (BuildSite(members=")
    assert "systemd-run" not in " ".join(commands)


def test_the_seed_builds_and_hands_on_its_wheel_or_hands_on_the_one_it_kept():
    site = site_of_members(**{"op-test-host": True, "other": True})
    commands, _ = operation(site, FACTS)
    assert "systemd-run" in commands[0]
    assert commands[1].startswith("FunctionCommand(_wait_for_build, ('2.8.3', BuildSite(")
    kept = {
        **FACTS,
        PythonPackages: {"flash-attn": "2.8.3"},
        JsonRecord: {"archs": ["90"], "wheel": "/var/lib/pyinfra-sglang/wheels/x.whl"},
    }
    commands, noops = operation(site, kept)
    assert noops == [] and len(commands) == 1
    assert commands[0].startswith("FunctionCommand(_kept_wheel_relayed, (BuildSite(")
    # Nobody copies: the seed is any host (its record covers the GPUs: nothing to do).
    commands, noops = operation(site_of_members(**{"op-test-host": False}), kept)
    assert commands == [] and noops == [
        "flash-attn 2.8.3 is installed, built for 90 (the GPUs' 90)"
    ]


def run_of(active: list[str]) -> State:
    """A run whose active (connected) hosts are ``active``."""
    state = State(inventory=Inventory((active, {})), config=Config())
    state.active_hosts = set(state.inventory)
    return state


def test_a_copying_host_fails_naming_the_seed_that_is_not_in_the_run_or_could_not_build():
    host = Inventory((["b"], {})).get_host("b")
    with pytest.raises(OperationError, match="its site's seed a .*not in this run"):
        wheel_from_seed(run_of(["b"]), host, site_of_members(a=True, b=True))
    failed = site_of_members(a=True, b=True)
    failed.problem = "its build failed"
    failed.started.set()
    failed.ready.set()
    with pytest.raises(OperationError, match="seed a has no flash-attn wheel to give: its build"):
        wheel_from_seed(run_of(["a", "b"]), host, failed)


@pytest.mark.parametrize(
    "record",
    [
        {},
        # The record of a build whose script lost the wheel's name (systemd's ${} expansion):
        {"wheel": "/var/lib/pyinfra-sglang/wheels/flash-attn-2.8.3/", "sha256": ""},
        {"wheel": "/var/lib/pyinfra-sglang/wheels/flash-attn-2.8.3/x.whl", "sha256": ""},
        {"wheel": "/etc/shadow.whl", "sha256": "ab"},
        {"wheel": "/var/lib/pyinfra-sglang/wheels/flash-attn-2.8.3/a/b.whl", "sha256": "ab"},
    ],
)
def test_a_seed_whose_record_names_no_kept_wheel_hands_nothing_on(record):
    site = site_of_members(a=False, b=True)
    replies = iter([(True, json.dumps(record)), (True, "ab  /whatever\n")])
    with (
        patch.object(flash_attn_site, "run_on_host", side_effect=lambda *a, **k: next(replies)),
        pytest.raises(OperationError, match="names no kept wheel"),
    ):
        flash_attn_site.relay(None, site, "2.8.3")
    assert site.ready.is_set() and site.wheel is None and "names no kept wheel" in site.problem
