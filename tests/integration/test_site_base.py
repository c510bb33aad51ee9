"""deploy/site.py with the base role, applied over SSH to real Debian 12 test hosts.

The bad-input tests prove, by a snapshot of each host's packages and apt configuration, that
nothing changed on any host; then the real apply, its host state, and a second apply that
changes nothing.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from pyinfra_sglang import data
from roles.base import UNATTENDED_UPGRADES_BLACKLIST
from tests.hosts.apply import apply, write_inventory

pytestmark = pytest.mark.hosts

BASE_PACKAGES = data.platforms().base.packages
# What "nothing changed" means on a host: its packages and its apt configuration.
SNAPSHOT = (
    "dpkg-query -W -f '${Package} ${Version}\\n'; "
    "ls -l --time-style=+%s /etc/apt/apt.conf.d/ /var/lib/apt/lists/"
)


@pytest.fixture
def inventory(site_inventory):
    # Not the applied one: the bad-input tests must hold whether or not site.py ran before.
    return site_inventory


def snapshots(host_pool, hosts) -> dict[str, str]:
    return {h.address: host_pool.run(h, SNAPSHOT).stdout for h in hosts}


BAD_VALUES = [
    # (kind, field, value as written in an inventory file, as --data, expected message part)
    ("wrong type", "sglang_port", "'http'", "sglang_port=http", "valid integer"),
    ("unknown key", "nvidia_drvier_branch", "590", "nvidia_drvier_branch=590", "unknown key"),
    ("out of range", "sglang_port", "70000", "sglang_port=70000", "less than or equal to 65535"),
]


@pytest.mark.parametrize("dry", [False, True], ids=["apply", "dry"])
@pytest.mark.parametrize("via", ["inventory-file", "--data"])
@pytest.mark.parametrize(
    ("kind", "field", "file_value", "cli_value", "expected"),
    BAD_VALUES,
    ids=[b[0] for b in BAD_VALUES],
)
def test_bad_inventory_stops_before_any_change(
    tmp_path, host_pool, hosts, inventory, kind, field, file_value, cli_value, expected, via, dry
):
    before = snapshots(host_pool, hosts)
    if via == "inventory-file":
        bad_host = hosts[1].address
        bad = tmp_path / "bad_inventory.py"
        text = inventory.read_text().replace(
            f"({bad_host!r}, {{", f"({bad_host!r}, {{{field!r}: {file_value}, "
        )
        assert text != inventory.read_text()
        bad.write_text(text)
        result = apply(bad, dry=dry)
        source, bad_hosts = "host data", [bad_host]
    else:
        result = apply(inventory, options=("--data", cli_value), dry=dry)
        source, bad_hosts = "--data", [h.address for h in hosts]

    assert result.returncode != 0, result.describe()
    assert not result.executed, result.describe()
    assert "invalid inventory, nothing was changed" in result.stderr
    for address in bad_hosts:
        line = next(
            (ln for ln in result.stderr.splitlines() if f"host {address}: {field} =" in ln), None
        )
        assert line is not None, result.describe()
        assert f"(from {source})" in line and expected in line and "allowed:" in line
        if kind == "unknown key":
            assert "(value not shown)" in line and "did you mean nvidia_driver_branch" in line
        else:
            assert file_value.strip("'") in line
    if via == "inventory-file":
        # The good host has no problem (a warning, e.g. about a secret file's mode, is none).
        about_good_host = [
            ln for ln in result.stderr.splitlines() if f"host {hosts[0].address}:" in ln
        ]
        assert all(ln.lstrip().startswith("warning:") for ln in about_good_host), about_good_host
    assert snapshots(host_pool, hosts) == before


def test_unsupported_distro_is_refused_before_any_host_changes(host_pool, hosts, tmp_path):
    [odd] = host_pool.boot(1)
    host_pool.run(odd, "sed -i 's/^VERSION_ID=.*/VERSION_ID=\"11\"/' /etc/os-release")
    inventory = write_inventory(
        tmp_path / "mixed.py",
        {"gpu_hosts": [(h.address, host_pool.inventory_data()) for h in [*hosts, odd]]},
    )
    before = snapshots(host_pool, [*hosts, odd])
    result = apply(inventory)
    assert result.returncode != 0 and not result.executed, result.describe()
    assert f"host {odd.address}: unsupported distro Debian GNU/Linux 12 (bookworm)" in result.stderr
    assert (
        "VERSION_ID=11" in result.stderr
        and "supported: ubuntu 22.04, ubuntu 24.04, debian 12" in result.stderr
    )
    assert snapshots(host_pool, [*hosts, odd]) == before
    host_pool.stop(odd)


def test_virtualization_fact_sees_the_container(inventory, hosts):
    # As docs/roles.md gives it; pyinfra names the fact by its module (checks/facts/kernel.py).
    result = apply(inventory, "fact", "checks.facts.Virtualization")
    assert result.returncode == 0, result.describe()
    facts = json.loads(result.stdout)["checks.facts.kernel.Virtualization"]
    for h in hosts:
        assert facts[h.address]["container"] == "systemd-nspawn"


def test_site_applies_base_then_changes_nothing(host_pool, hosts, inventory, site_first_apply):
    first = site_first_apply
    assert first.returncode == 0 and not first.errors(), first.describe()
    for h in hosts:
        changed = first.changed(h.address)
        assert "Base | Install build prerequisites" in changed
        assert "Base | Keep unattended-upgrades off the NVIDIA driver and CUDA" in changed
        # The test hosts are containers: headers for the outer kernel are a noop, not an error.
        assert "Base | Install headers for the running kernel" in first.unchanged(h.address)
        # This machine's kernel (no Debian flavor in its release) has no metapackage to follow.
        assert "Base | Install the headers metapackage of the kernel's flavor" in (
            first.unchanged(h.address)
        )
    assert "names no distro flavor: no headers metapackage follows it" in first.stderr
    for h in hosts:
        assert f"[{h.address}] noop: linux-headers-" in first.stderr
    assert "in a container (systemd-nspawn)" in first.stderr

    for h in hosts:
        status = host_pool.run(h, f"dpkg-query -W -f '${{Status}}\\n' {' '.join(BASE_PACKAGES)}")
        assert status.stdout.split("\n")[: len(BASE_PACKAGES)] == ["install ok installed"] * len(
            BASE_PACKAGES
        )
        mode = host_pool.run(h, f"stat -c '%a %U' {UNATTENDED_UPGRADES_BLACKLIST}").stdout.split()
        assert mode == ["644", "root"]
        # apt itself must read the blacklist, not just find a file there.
        dump = host_pool.run(h, "apt-config dump Unattended-Upgrade::Package-Blacklist").stdout
        for prefix in ("nvidia-", "libnvidia-", "cuda-"):
            assert f'Unattended-Upgrade::Package-Blacklist:: "{prefix}";' in dump

    second = apply(inventory)
    assert second.returncode == 0 and not second.errors(), second.describe()
    second.assert_unchanged()
    assert len(second.operations) >= 3


# How unattended-upgrades keeps apt busy on a fresh image: apt's lists lock for a while (its
# update), dpkg's frontend lock for longer (its upgrade). apt takes both with fcntl locks.
LISTS_HELD_S, DPKG_HELD_S = 5, 30
LOCK_HOLDER = f"""
import fcntl, time
lists = open("/var/lib/apt/lists/lock", "w")
fcntl.lockf(lists, fcntl.LOCK_EX)
frontend = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(frontend, fcntl.LOCK_EX)
open("/run/apt-locks-held", "w").close()
time.sleep({LISTS_HELD_S})
lists.close()
time.sleep({DPKG_HELD_S - LISTS_HELD_S})
frontend.close()
"""


def test_base_waits_for_a_busy_apt_then_installs(host_pool, tmp_path):
    [fresh] = host_pool.boot(1)
    inventory = write_inventory(
        tmp_path / "one.py", {"hosts": [(fresh.address, host_pool.inventory_data())]}
    )
    deploy = tmp_path / "base_only.py"
    deploy.write_text("from roles.base import base\n\nbase()\n")
    host_pool.run(
        fresh,
        "systemd-run --unit=hold-apt-locks --collect /usr/bin/python3 -c "
        f"{shlex.quote(LOCK_HOLDER)} && "
        "for i in $(seq 100); do [ -e /run/apt-locks-held ] && break; sleep 0.1; done",
    )
    assert host_pool.run(fresh, "test -e /run/apt-locks-held", check=False).returncode == 0
    started = time.monotonic()
    result = apply(inventory, str(deploy), options=("-vvv",))
    waited = time.monotonic() - started
    assert result.returncode == 0 and not result.errors(), result.describe()
    assert "Base | Install build prerequisites" in result.changed(fresh.address)
    # apt-get update was retried while the lists were locked; the install waited for dpkg.
    assert "apt-get update failed (attempt 1 of" in result.stderr, result.describe()
    assert waited >= DPKG_HELD_S
    status = host_pool.run(fresh, f"dpkg-query -W -f '${{Status}}\\n' {' '.join(BASE_PACKAGES)}")
    assert status.stdout.split("\n")[: len(BASE_PACKAGES)] == ["install ok installed"] * len(
        BASE_PACKAGES
    )
    again = apply(inventory, str(deploy))
    again.assert_unchanged()
    host_pool.stop(fresh)
