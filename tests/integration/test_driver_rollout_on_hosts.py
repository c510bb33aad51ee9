"""A rolling driver upgrade of four serving test hosts behind SGLang's router (stand-in
gateway on the first): the fleet moves from branch 590 to 595, one host at a time, while a
client sends chat requests through the router for the whole run. One host is made to fail
its validation (its "kernel" keeps the old module): the rollout stops there, that host stays
out of the router with its reason, the hosts after it keep their driver and keep serving.
The operator fixes it and marks another host out of service; a re-run resumes, upgrades the
marked host without putting it back, and changes nothing when applied again; once the mark
is gone, the next run puts it back.

The stand-in repository carries both branches (tests/hosts/aptrepo.py). A test host is a
container: where it holds LOAD_ON_INSTALL, installing a driver counts as the reboot into it
(the nvidia-smi replay then reports the installed release)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pyinfra_sglang import data
from tests.hosts.apply import apply, write_inventory
from tests.hosts.aptrepo import DRIVER_VERSIONS, LOAD_ON_INSTALL, LOADED_DRIVER
from tests.integration.conftest import open_standin_record

pytestmark = pytest.mark.hosts

ROUTER_PORT = 30080
OLD = DRIVER_VERSIONS["590"].rsplit("-", 1)[0]
NEW = DRIVER_VERSIONS["595"].rsplit("-", 1)[0]
STATE = data.rollout().paths.state
OUT_OF_SERVICE = data.rollout().paths.out_of_service


class Client:
    """Chat requests through the router one after another, and the router's worker list
    sampled beside them: served, failed, and the most workers out of the router at once."""

    def __init__(self, router: str, key: str, workers: int):
        self.router, self.key, self.workers = router, key, workers
        self.served = self.failed = self.most_out = 0
        self.errors: list[str] = []
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self.ask, self.sample)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        time.sleep(1)
        return self

    def __exit__(self, *exc):
        time.sleep(1)
        self.stopped.set()
        for thread in self.threads:
            thread.join(60)

    def ask(self) -> None:
        body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "France?"}]})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"}
        while not self.stopped.is_set():
            request = urllib.request.Request(
                f"{self.router}/v1/chat/completions", data=body.encode(), headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    json.load(response)
                self.served += 1
            except (OSError, ValueError) as error:
                self.failed += 1
                self.errors.append(repr(error))
            time.sleep(0.05)

    def sample(self) -> None:
        while not self.stopped.is_set():
            try:
                with urllib.request.urlopen(f"{self.router}/workers", timeout=10) as response:
                    listed = json.load(response)["workers"]
                self.most_out = max(self.most_out, self.workers - len(listed))
            except (OSError, ValueError):
                pass
            time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet(host_pool):
    """Four fresh test hosts whose driver installs count as loaded."""
    hosts = host_pool.boot(4)
    for test_host in hosts:
        open_standin_record(host_pool, test_host)
        host_pool.run(test_host, f"mkdir -p /etc/nvidia-smi-replay && touch {LOAD_ON_INSTALL}")
    yield hosts
    for test_host in hosts:
        host_pool.stop(test_host)


def driver_state(host_pool, test_host) -> dict:
    """What the host holds: the loaded release nvidia-smi reports, the installed module
    package's version, and the rollout record (None without one)."""
    smi = re.search(r"Driver Version: (\S+)", host_pool.run(test_host, "nvidia-smi").stdout)
    installed = host_pool.run(
        test_host, "dpkg-query -W -f '${Version}' nvidia-kernel-open-dkms", check=False
    ).stdout
    record = host_pool.run(test_host, f"cat {STATE}", check=False)
    return {
        "loaded": smi.group(1) if smi else None,
        "installed": installed.rsplit("-", 1)[0] if installed else None,
        "record": json.loads(record.stdout) if record.returncode == 0 else None,
    }


def routed(router: str) -> list[str]:
    with urllib.request.urlopen(f"{router}/workers", timeout=10) as response:
        return sorted(w["url"].rstrip("/") for w in json.load(response)["workers"])


def test_a_branch_move_rolls_host_by_host_behind_the_router_and_stops_at_a_failed_host(
    host_pool, fleet, site_data, tmp_path
):
    key = Path(site_data["sglang_api_key_file"]).read_text().strip()
    workers = [f"http://{h.address}:30000" for h in fleet]
    first = {"sglang_router_worker_urls": workers}
    # The default budget: one host at a time (the site hosts' data turns rollouts off).
    rolling = {k: v for k, v in site_data.items() if k != "driver_rollout_max_unavailable"}
    inventory = write_inventory(
        tmp_path / "fleet.py",
        {
            "gpu_hosts": [
                (h.address, {**rolling, "sglang_host": h.address, **(first if i == 0 else {})})
                for i, h in enumerate(fleet)
            ]
        },
    )
    router = f"http://{fleet[0].address}:{ROUTER_PORT}"
    converged = apply(inventory, timeout=1800)
    assert converged.returncode == 0, converged.describe()
    assert {driver_state(host_pool, h)["loaded"] for h in fleet} == {OLD}
    assert routed(router) == sorted(workers)

    # The second host's kernel will keep the old module: its validation must fail. Turns
    # follow the inventory's order: the first host goes before it, the last two never go.
    first_host, failing, *rest = fleet
    host_pool.run(failing, f"rm -f {LOAD_ON_INSTALL}")
    to_595 = ("--data", "nvidia_driver_branch=595")
    with Client(router, key, len(fleet)) as client:
        stopped = apply(inventory, options=to_595, timeout=1800)
    assert stopped.returncode != 0, stopped.describe()
    assert client.served > 0 and client.failed == 0, client.errors[:5]
    assert client.most_out == 1, client.most_out
    stopped_line = f"not changed: the driver rollout stopped at {failing.address}"
    for h in rest:
        said = [line for line in stopped.stderr.splitlines() if f"[{h.address}]" in line]
        assert any(stopped_line in line for line in said), stopped.describe()

    states = {h.address: driver_state(host_pool, h) for h in fleet}
    assert states[first_host.address] == {"loaded": NEW, "installed": NEW, "record": None}
    failed = states[failing.address]
    assert (failed["installed"], failed["loaded"]) == (NEW, OLD), failed
    assert failed["record"]["phase"] == "failed", failed
    problem = failed["record"]["problem"]
    assert problem.startswith("validation on driver branch 595 failed"), failed
    assert "driver-drift: " in problem, failed
    for h in rest:  # never started: the old driver, still serving behind the router
        assert states[h.address] == {"loaded": OLD, "installed": OLD, "record": None}
    assert routed(router) == sorted(f"http://{h.address}:30000" for h in fleet if h != failing)
    print(
        f"\nrollout to {NEW}, stopped at {failing.address}: {client.served} requests served, "
        f"{client.failed} failed, at most {client.most_out} host(s) out"
    )

    # The operator reboots it into the new module, and marks the last host out of service;
    # two may be out at once. The re-run resumes from the record: the failed host is validated
    # and rejoins, the third follows, the last is upgraded without a turn and stays out.
    host_pool.run(failing, f"echo {NEW} > {LOADED_DRIVER} && touch {LOAD_ON_INSTALL}")
    marked = rest[-1]
    host_pool.run(marked, f"mkdir -p /etc/pyinfra-sglang && echo maintenance > {OUT_OF_SERVICE}")
    two = (*to_595, "--data", "driver_rollout_max_unavailable=2")
    with Client(router, key, len(fleet)) as client:
        resumed = apply(inventory, options=two, timeout=1800)
    assert resumed.returncode == 0, resumed.describe()
    assert client.served > 0 and client.failed == 0, client.errors[:5]
    assert client.most_out == 2, client.most_out
    for h in fleet:
        state = driver_state(host_pool, h)
        assert (state["loaded"], state["installed"]) == (NEW, NEW), state
        assert (state["record"] or {}).get("phase") == ("out" if h == marked else None), state
    assert routed(router) == sorted(f"http://{h.address}:30000" for h in fleet if h != marked)
    print(
        f"resumed: {client.served} requests served, {client.failed} failed, at most "
        f"{client.most_out} host(s) out"
    )
    apply(inventory, options=two).assert_unchanged()  # the marked host is left alone

    # The mark gone, the next run validates it and puts it back; then nothing changes.
    host_pool.run(marked, f"rm -f {OUT_OF_SERVICE}")
    back = apply(inventory, options=two)
    assert back.returncode == 0, back.describe()
    assert driver_state(host_pool, marked)["record"] is None
    assert routed(router) == sorted(workers)
    apply(inventory, options=two).assert_unchanged()
