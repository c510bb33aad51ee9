"""The model fetched once per site (model_fetch_once): of the hosts of a run with the same
model, revision and Hub, the first in the inventory (the seed) downloads it as any host
would; then it serves its snapshot, read-only, on its own address with a token made for this
run, while the others copy it with snapshot_fetch.py, each file checked against the Hub's
list (size and blob id) read on the controller. The others never reach the Hub.

Not a scheduler: pyinfra runs every host's download operation side by side as always; a
copying host waits in it for its seed (one meeting point per site and pyinfra State).
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass, field
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
from pyinfra_sglang.serving.render import _env_value as env_value
from roles.waiting import wait_until

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
    try:
        start_unit(host, command, serve_env(site.token), settings.seed_env_file)
        listening = f"ss -ltnH {q(f'sport = :{port}')} | grep -q ."
        if not wait_until(lambda: run_on_host(host, listening)[0], 30, 0.5):
            raise OperationError(f"the snapshot server on {address}:{port} did not listen")
        host_part = f"[{address}]" if ":" in address else address
        site.url = f"http://{host_part}:{port}/{site.token}"
        logger.info(f"{host.print_prefix}serving the snapshot to {', '.join(sorted(site.copying))}")
    except OperationError as error:
        site.problem = str(error)
        raise
    finally:
        site.ready.set()

    def over() -> bool:
        # Every copying host finished, or failed before it came to copy (it never will).
        gone = {h.name for h in state.failed_hosts}
        return site.all_finished.is_set() or site.copying - site.finished <= gone

    wait_until(over, timeout_s + SERVE_MARGIN_S, 1)
    run_on_host(host, f"systemctl stop {q(settings.seed_unit)} 2>/dev/null || true")
    missing = sorted(site.copying - site.finished)
    if missing:
        logger.warning(f"{host.print_prefix}stopped serving; not finished: {', '.join(missing)}")


def wait_for_seed(state, host, site: Site, timeout_s: int) -> str:
    """On a copying host: the seed's URL once it serves; OperationError when it cannot."""
    active = {h.name for h in state.inventory.get_active_hosts()}
    if site.seed not in active:
        raise OperationError(
            f"{host.name} copies the model from its site's seed {site.seed} "
            "(model_fetch_once), which is not in this run: run it with the seed, or unset "
            "model_fetch_once for this host"
        )
    if not site.ready.wait(timeout=timeout_s + SERVE_MARGIN_S):
        raise OperationError(f"the site's seed {site.seed} did not serve the snapshot in time")
    if site.url is None:
        raise OperationError(
            f"the site's seed {site.seed} could not serve the snapshot: "
            f"{site.problem or 'its download failed'}"
        )
    return site.url
