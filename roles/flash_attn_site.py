"""flash-attn built once a site (flash_attn_build_once): of the hosts of a run that build the
same flash-attn release into the same virtualenv (SGLang, Python and CUDA release in its
name), for the same CUDA architectures and from the same index, the first in the inventory
(the seed) builds it as any host would and keeps its wheel; the controller fetches that
wheel once over SSH, checks it against the sha256 the seed computed, and hands it to the
others, which check it again, install it and record the seed's build as theirs.

The wheel (hundreds of MB) passes through the controller; the weights (hundreds of GB) go
host to host (roles/model_site.py). Not a scheduler: pyinfra runs every host's build
operation side by side; a copying host waits in it for the wheel.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from weakref import WeakKeyDictionary

from gevent.event import Event
from pyinfra import logger
from pyinfra.api.exceptions import OperationError

from checks.host_context import run_on_host, transfer_arguments
from checks.run_summary import real
from pyinfra_sglang import data
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.python_env.flash_attn_build_plan import build_log_paths
from roles.waiting import seed_in_run

# How long a copying host waits for its seed's operation to begin (the seed runs the same
# operation at the same time); the build itself has no limit here, as on the seed.
SEED_START_S = 120


@dataclass
class BuildSite:
    """One site's build in one run: its members (host -> build due), registered while
    planning; the seed is the first of them in the inventory."""

    order: tuple[str, ...] = field(repr=False)  # the inventory's hosts, in its order
    members: dict[str, bool] = field(default_factory=dict)
    started: Event = field(default_factory=Event, repr=False)
    ready: Event = field(default_factory=Event, repr=False)
    wheel: Path | None = None  # on the controller, once fetched
    sha256: str | None = None
    record: dict | None = None  # the seed's build record
    problem: str | None = None
    finished: set[str] = field(default_factory=set)

    @property
    def seed(self) -> str:
        return min(self.members, key=self.order.index)

    @property
    def copying(self) -> set[str]:
        """The members with a build due, but the seed."""
        seed = self.seed
        return {name for name, due in self.members.items() if due and name != seed}

    def finish(self, name: str) -> None:
        """A copying host is done with the wheel; the last one removes the controller's copy."""
        self.finished.add(name)
        if self.finished >= self.copying and self.wheel is not None:
            shutil.rmtree(self.wheel.parent, ignore_errors=True)


_SITES: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {site key: BuildSite}


def site_key(config: HostConfig, archs: tuple[str, ...]) -> tuple:
    """What makes two hosts' builds the same wheel: the venv (its name holds the SGLang,
    Python and CUDA releases, so the same torch), the release, the architectures and the
    index it comes from."""
    return (
        config.venv_path,
        config.flash_attn_version,
        tuple(sorted(archs)),
        str(config.pypi_index_url),
    )


def register(state, host, key: tuple, due: bool) -> BuildSite:
    """At planning: this host joins its site (``due``: its build is due). The first member
    in the inventory seeds it; the others whose build is due copy."""
    found = _SITES.setdefault(real(state), {})
    order = tuple(h.name for h in state.inventory)
    site = found.setdefault(key, BuildSite(order=order))
    site.members[host.name] = due
    return site


def site_of(state, host, key: tuple) -> BuildSite | None:
    return _SITES.get(real(state), {}).get(key)


def wheel_folder(version: str) -> str:
    """Where a host keeps the wheel of its last flash-attn ``version`` build."""
    return f"{data.python().flash_attn.wheel_dir}/flash-attn-{version}"


def venv_python(venv: str) -> str:
    return f"{venv}/bin/python"


def wheel_installed(python: str, index_args: str, wheel: str) -> str:
    """Shell that installs the flash-attn wheel ``wheel`` with the venv's ``python`` (both
    shell words, quoted or a variable) from ``index_args``: flash-attn alone reinstalled (the
    same version for other GPUs too), then whatever it requires that the venv lacks."""
    pip = f"{python} -m pip install --disable-pip-version-check --no-cache-dir"
    pip = f"{pip} {index_args}" if index_args else pip
    return f"{pip} --no-deps --force-reinstall {wheel} && {pip} {wheel}"


def _kept_wheel(host, version: str) -> tuple[str, str, dict]:
    """The seed's kept wheel of ``version``: (path, sha256 read now, build record); raises
    when it is not there or differs from its record."""
    q = shlex.quote
    record_path = build_log_paths(version)[1]
    ok, out = run_on_host(host, f"cat {q(record_path)}")
    try:
        record = json.loads(out) if ok else {}
    except ValueError:
        record = {}
    path = str(record.get("wheel") or "")
    name = path.removeprefix(wheel_folder(version) + "/")
    if name == path or "/" in name or not name.endswith(".whl") or not record.get("sha256"):
        raise OperationError(f"its build record {record_path} names no kept wheel")
    ok, out = run_on_host(host, f"sha256sum {q(path)}")
    found = out.split()[0] if ok and out.split() else ""
    if found != record.get("sha256"):
        raise OperationError(f"its wheel {path} is not the one it recorded building")
    return path, found, record


def relay(host, site: BuildSite, version: str) -> None:
    """On the seed, its build done: its wheel fetched to the controller, checked."""
    try:
        path, sha256, record = _kept_wheel(host, version)
        target = Path(tempfile.mkdtemp(prefix="pyinfra-sglang-flash-attn-")) / Path(path).name
        with transfer_arguments(host) as transfer:
            try:
                fetched = host.get_file(path, str(target), **transfer(path))
            except OSError as error:  # paramiko's SFTP errors
                raise OperationError(f"could not fetch its wheel {path}: {error}") from None
            if not fetched:
                raise OperationError(f"could not fetch its wheel {path}")
        digest = hashlib.sha256()
        with target.open("rb") as wheel:
            for chunk in iter(lambda: wheel.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            raise OperationError(f"its wheel {path} changed on the way to the controller")
        site.wheel, site.sha256, site.record = target, sha256, record
        size = target.stat().st_size / 1e6
        logger.info(
            f"{host.print_prefix}flash-attn {version}: its wheel ({size:.1f} MB) goes to "
            f"{', '.join(sorted(site.copying))}"
        )
    except OperationError as error:
        site.problem = str(error)
        raise
    finally:
        site.ready.set()


def wheel_from_seed(state, host, site: BuildSite) -> BuildSite:
    """On a copying host: the site once its seed's wheel is on the controller;
    OperationError when it will not be."""
    seed_in_run(state, host, site.seed, "installs flash-attn", "flash_attn_build_once")
    if not site.started.wait(timeout=SEED_START_S):
        raise OperationError(f"the site's seed {site.seed} did not start its build")
    site.ready.wait()
    if site.wheel is None:
        raise OperationError(
            f"the site's seed {site.seed} has no flash-attn wheel to give: "
            f"{site.problem or 'its build failed'}"
        )
    return site


def installed_from_seed(host, site: BuildSite, version: str, venv: str, prefix: str, args: str):
    """Upload the seed's wheel, check its sha256 on this host, install it (flash-attn alone
    reinstalled, then whatever it needs and the venv lacks) and record the seed's build."""
    q = shlex.quote
    folder = wheel_folder(version)
    path = f"{folder}/{site.wheel.name}"
    staging = f"{folder}.new"
    ok, out = run_on_host(host, f"rm -rf {q(staging)} && mkdir -p -m 755 {q(staging)}")
    if not ok:
        raise OperationError(f"could not prepare {staging}: {out}")
    started = time.monotonic()
    with transfer_arguments(host) as transfer:
        uploaded = f"{staging}/{site.wheel.name}"
        try:
            put = host.put_file(str(site.wheel), uploaded, **transfer(uploaded))
        except OSError as error:  # paramiko's SFTP errors
            raise OperationError(f"could not upload the wheel to {uploaded}: {error}") from None
        if not put:
            raise OperationError(f"could not upload the wheel to {uploaded}")
    ok, out = run_on_host(host, f"sha256sum {q(uploaded)}")
    if not ok or out.split()[:1] != [site.sha256]:
        run_on_host(host, f"rm -rf {q(staging)}")
        raise OperationError(f"the wheel uploaded to {uploaded} is not the seed's")
    install = wheel_installed(q(venv_python(venv)), args, q(uploaded))
    log, record_path = build_log_paths(version)
    record = {
        **(site.record or {}),
        "wheel": path,
        "sha256": site.sha256,
        "copied_from": site.seed,
    }
    ok, out = run_on_host(
        host,
        f"{prefix} {{ {install}; }} > {q(log)} 2>&1 && "
        f"rm -rf {q(folder)} && mv {q(staging)} {q(folder)} && "
        f"printf '%s\\n' {q(json.dumps(record))} > {q(record_path)}",
    )
    if not ok:
        _, tail = run_on_host(host, f"tail -n 20 {q(log)} 2>/dev/null")
        raise OperationError(f"could not install the seed's wheel (log {log}): {tail.strip()}")
    took = time.monotonic() - started
    logger.info(
        f"{host.print_prefix}flash-attn {version}: installed {site.wheel.name} built on "
        f"{site.seed} in {took:.1f} s"
    )
