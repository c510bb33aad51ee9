"""The model fetched once per site (model_fetch_once): of the hosts of a run with the same
model, revision and Hub, the first in the inventory (the seed) downloads it as any host
would; then it serves its snapshot, read-only, on its own address with a token made for this
run, while the others copy it with snapshot_fetch.py, each file checked against the Hub's
list (size and blob id) read on the controller. The others never reach the Hub. While it
serves, an nftables table on the seed admits only the copying hosts to its port: each tells
the address its packets to the seed leave from, read on that host.

Not a scheduler: pyinfra runs every host's download operation side by side as always; a
copying host waits in it for its seed (one meeting point per site and pyinfra State).
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass, field
from ipaddress import ip_address
from weakref import WeakKeyDictionary

from gevent.event import Event
from pyinfra import logger
from pyinfra.api.exceptions import OperationError

from checks.host_context import run_on_host
from checks.run_summary import real
from pyinfra_sglang import data
from pyinfra_sglang.inventory import host_config, host_profile
from pyinfra_sglang.inventory.groups import member_address
from pyinfra_sglang.model_files.model_snapshot import (
    DEFAULT_ENDPOINT,
    Snapshot,
    model_revision,
)
from pyinfra_sglang.network.seed_firewall import seed_firewall_plan, seed_firewall_rules
from pyinfra_sglang.serving.render import _env_value as env_value
from roles.waiting import seed_in_run, wait_until

# How long a copying host waits for its seed to finish its own download, past the download
# timeout, and how long the seed serves after it started.
SERVE_MARGIN_S = 300


@dataclass
class Site:
    """One site's meeting point in one run."""

    seed: str
    copying: set[str] = field(default_factory=set)  # hosts that copy from the seed
    # Never in a repr: a FunctionCommand's arguments show in pyinfra's debug output.
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    ready: Event = field(default_factory=Event, repr=False)
    url: str | None = field(default=None, repr=False)  # once the seed serves
    problem: str | None = None
    sources: dict[str, str] = field(default_factory=dict)  # copying host -> its address
    finished: set[str] = field(default_factory=set)
    all_finished: Event = field(default_factory=Event, repr=False)

    def finish(self, name: str) -> None:
        self.finished.add(name)
        if self.finished >= self.copying:
            self.all_finished.set()


_SITES: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {site key: Site}


def sites(state) -> dict[tuple, Site]:
    return _SITES.setdefault(real(state), {})


def site_key(host) -> tuple:
    config = host_config(host)
    profile = host_profile(config)
    endpoint = str(config.hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")
    revision = model_revision(config.sglang_model_revision, profile.revision)
    return (endpoint, profile.model, revision)


def seed_of(host) -> str:
    """The site's seed: the first host of the inventory that fetches once with the same
    model, revision and Hub."""
    key = site_key(host)
    for other in host.inventory:
        if host_config(other).model_fetch_once and site_key(other) == key:
            return other.name
    return host.name


def seeds_others(host) -> bool:
    """Is this host a seed other hosts of the inventory may copy from, with its firewall on
    (nftables then installed)?"""
    if not host_config(host).model_seed_firewall:
        return False
    key = site_key(host)
    members = [o for o in host.inventory if host_config(o).model_fetch_once and site_key(o) == key]
    return len(members) > 1 and members[0].name == host.name


def register(state, host, missing: bool) -> Site:
    """At planning (host after host): this host's place in its site."""
    found = sites(state)
    key = site_key(host)
    site = found.setdefault(key, Site(seed=seed_of(host)))
    if host.name != site.seed and missing:
        site.copying.add(host.name)
    return site


def seed_address(state, site: Site) -> str:
    """Where the other hosts reach the seed, and what its server binds to: its sglang_host,
    unless that is loopback (the default) or unspecified; then the address the inventory
    reaches it by."""
    seed = state.inventory.get_host(site.seed)
    bind = host_config(seed).sglang_host
    return member_address(seed) if bind.is_unspecified or bind.is_loopback else str(bind)


def manifest(snapshot: Snapshot) -> bytes:
    """The files a copying host must end with, as the Hub lists them: nothing secret."""
    sizes = dict(snapshot.files)
    files = [
        {"path": path, "size": sizes[path], "etag": blob, "lfs": lfs}
        for path, blob, lfs in snapshot.blobs
    ]
    return json.dumps({"repo": snapshot.repo, "commit": snapshot.commit, "files": files}).encode()


def serve_env(token: str) -> bytes:
    return f"SNAPSHOT_TOKEN={env_value('SNAPSHOT_TOKEN', token)}\n".encode()


def fetch_env(url: str) -> bytes:
    # The seed's address comes from the inventory: escaped for systemd's env file syntax.
    return f"SNAPSHOT_URL={env_value('SNAPSHOT_URL', url)}\n".encode()


# The address this host's packets to ADDRESS:PORT leave from: the kernel's own choice of
# route and source (connecting a UDP socket sends nothing).
SOURCE_PROGRAM = (
    "import socket, sys\n"
    "family, kind, proto, _, target = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), "
    "type=socket.SOCK_DGRAM)[0]\n"
    "probe = socket.socket(family, kind, proto)\n"
    "probe.connect(target)\n"
    "print(probe.getsockname()[0])\n"
)


def announce_source(state, host, site: Site, python: str) -> None:
    """On a copying host: the address its packets to the seed leave from, for the seed's
    firewall (none read where the seed has it off). OperationError when it cannot be read."""
    q = shlex.quote
    seed_config = host_config(state.inventory.get_host(site.seed))
    if not seed_config.model_seed_firewall:
        return
    address = seed_address(state, site)
    port = seed_config.model_seed_port
    ok, out = run_on_host(host, f"{q(python)} -c {q(SOURCE_PROGRAM)} {q(address)} {port}")
    source = out.strip().splitlines()[-1] if ok and out.strip() else ""
    try:
        ip_address(source.split("%")[0])
    except ValueError:
        raise OperationError(
            f"could not read the address this host reaches its seed {site.seed} "
            f"({address}) from: {out.strip() or 'no output'}"
        ) from None
    site.sources[host.name] = source.split("%")[0]


def _firewall_loaded(state, host, site: Site, port: int) -> str:
    """The seed's table admitting only the copying hosts that told their address (those
    that failed first are left out); the admitted addresses. OperationError when nft
    refuses the rules or is missing."""

    def announced() -> bool:
        gone = {h.name for h in state.failed_hosts}
        return site.copying <= set(site.sources) | site.finished | gone

    if not wait_until(announced, 60, 0.2):
        silent = sorted(site.copying - set(site.sources))
        raise OperationError(f"the copying hosts {', '.join(silent)} did not tell their address")
    plan = seed_firewall_plan(port, list(site.sources.values()))
    q = shlex.quote
    ok, out = run_on_host(host, f"printf '%s' {q(seed_firewall_rules(plan))} | nft -f -")
    if not ok:
        raise OperationError(
            f"could not load the seed's firewall (nft): {out.strip()}; it does not serve "
            "unfirewalled (model_seed_firewall: false serves on the token alone)"
        )
    return plan.admitted()


def _firewall_removed(host) -> None:
    table = shlex.quote(data.model().download.seed_table)
    run_on_host(host, f"nft delete table inet {table} 2>/dev/null || true")


def serve(state, host, site: Site, folder: str, timeout_s: int, unit_command, start_unit) -> None:
    """On the seed, its snapshot complete: serve it until every copying host finished (or
    the time is up), then stop. From roles/model.py: ``unit_command(program, args,
    runtime_s, env_file)`` the transient unit's command line (the download's user and
    sandbox, nothing writable), ``start_unit(host, command, env, env_file)`` its start with
    a root-only env file."""
    settings = data.model().download
    config = host_config(host)
    address = seed_address(state, site)
    port = config.model_seed_port
    q = shlex.quote
    args = ["--bind", address, "--port", str(port), "--snapshot", folder]
    command = unit_command(
        "snapshot_serve.py", args, timeout_s + SERVE_MARGIN_S, settings.seed_env_file
    )
    firewall = config.model_seed_firewall
    try:
        admitted = (
            f"its firewall admits {_firewall_loaded(state, host, site, port)}"
            if firewall
            else "no firewall: model_seed_firewall is false, the token alone keeps it"
        )
        start_unit(host, command, serve_env(site.token), settings.seed_env_file)
        listening = f"ss -ltnH {q(f'sport = :{port}')} | grep -q ."
        if not wait_until(lambda: run_on_host(host, listening)[0], 30, 0.5):
            raise OperationError(f"the snapshot server on {address}:{port} did not listen")
        host_part = f"[{address}]" if ":" in address else address
        site.url = f"http://{host_part}:{port}/{site.token}"
        logger.info(
            f"{host.print_prefix}serving the snapshot to {', '.join(sorted(site.copying))} "
            f"({admitted})"
        )
    except OperationError as error:
        site.problem = str(error)
        run_on_host(host, f"systemctl stop {q(settings.seed_unit)} 2>/dev/null || true")
        if firewall:
            _firewall_removed(host)
        raise
    finally:
        site.ready.set()

    def over() -> bool:
        # Every copying host finished, or failed before it came to copy (it never will).
        gone = {h.name for h in state.failed_hosts}
        return site.all_finished.is_set() or site.copying - site.finished <= gone

    wait_until(over, timeout_s + SERVE_MARGIN_S, 1)
    run_on_host(host, f"systemctl stop {q(settings.seed_unit)} 2>/dev/null || true")
    if firewall:
        _firewall_removed(host)
    missing = sorted(site.copying - site.finished)
    if missing:
        logger.warning(f"{host.print_prefix}stopped serving; not finished: {', '.join(missing)}")


def wait_for_seed(state, host, site: Site, timeout_s: int) -> str:
    """On a copying host: the seed's URL once it serves; OperationError when it cannot."""
    seed_in_run(state, host, site.seed, "copies the model", "model_fetch_once")
    if not site.ready.wait(timeout=timeout_s + SERVE_MARGIN_S):
        raise OperationError(f"the site's seed {site.seed} did not serve the snapshot in time")
    if site.url is None:
        raise OperationError(
            f"the site's seed {site.seed} could not serve the snapshot: "
            f"{site.problem or 'its download failed'}"
        )
    return site.url
