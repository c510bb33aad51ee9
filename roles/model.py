"""Model weights as their own step, before the service: the profile's Hub model at a pinned
commit, asked of the Hub before any change (files, sizes, a gated or missing repository, a
bad revision, too little disk: refused naming host and model), then downloaded into the Hub
cache the service reads, resumably, in a transient unit with its own timeout and a progress
line in pyinfra's output every minute. A complete snapshot is a no-op; so is a local path,
once it is checked to hold a model."""

from __future__ import annotations

import shlex
import time
import urllib.parse
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.exceptions import OperationError, PyinfraError
from pyinfra.facts.files import File

from checks.facts import (
    CacheDirStates,
    FirstLine,
    FreeBytes,
    ModelConfigJson,
    NvidiaGpus,
    SnapshotFiles,
    read_once,
    read_together,
)
from checks.host_context import run_on_host
from pyinfra_sglang import data
from pyinfra_sglang.data_models import ModelDownload
from pyinfra_sglang.host_programs import program_path
from pyinfra_sglang.inventory import host_config, host_profile
from pyinfra_sglang.model_files.cache_dir import host_problem
from pyinfra_sglang.model_files.model_snapshot import (
    DEFAULT_ENDPOINT,
    GB,
    ModelPlanError,
    hub_cache_dir,
    hub_snapshot,
    is_local_model,
    model_revision,
    needed_bytes,
    ref_file,
    snapshot_folder,
)
from pyinfra_sglang.model_shape.profile_values import identity_values, profile_values
from pyinfra_sglang.model_shape.shape import ModelShapeError, shape_of
from pyinfra_sglang.redact import redact
from pyinfra_sglang.serving.model_sizing import ModelSizeError, needs_sizing, read_model
from pyinfra_sglang.serving.placement import NodePosition, place
from pyinfra_sglang.serving.profiles import load_profile, merge_overrides
from pyinfra_sglang.serving.render import _env_value as env_value
from pyinfra_sglang.serving.render import cache_dirs
from pyinfra_sglang.serving.secret_files import read_secret
from pyinfra_sglang.serving.service_files import gpu_set
from roles import model_site
from roles.common import packages_installed, put_private_file, unit_exec_words
from roles.service_trees import as_user
from roles.sglang_service import host_service_files, service_user, useradd_command
from roles.waiting import wait_until

PROGRAM = "model_download.py"
FETCH_PROGRAM = "snapshot_fetch.py"
SERVE_PROGRAM = "snapshot_serve.py"
PROGRAMS = (PROGRAM, FETCH_PROGRAM, SERVE_PROGRAM)
_reported: set[tuple[str, str]] = set()


class ModelRefused(PyinfraError):
    """The model cannot be put on this host as things are (the message says why)."""


def _settings() -> ModelDownload:
    return data.model().download


def download_user() -> str:
    """The user the download runs as: the service's, which owns the Hub cache."""
    return service_user()


def writable_paths(cache: str) -> list[str]:
    """What the download may write: the Hub cache, HF_HOME (the client's other state) and
    the log's folder."""
    log_dir = _settings().log.rsplit("/", 1)[0]
    return sorted({cache, cache_dirs()["HF_HOME"], log_dir})


def download_command(
    repo: str, commit: str, cache: str, total: int, python: str, timeout_s: int
) -> str:
    """The transient unit that runs the download program as the service user, sandboxed,
    stopped after ``timeout_s``. Its environment (the endpoint, which may carry a login,
    and the token) comes from the root-only env file, read by systemd: not one secret here."""
    settings = _settings()
    args = ["--repo", repo, "--commit", commit, "--cache-dir", cache]
    args += ["--total-bytes", str(int(total)), "--log", settings.log]
    args += ["--every", str(float(settings.log_every_s))]
    return unit_command(settings.unit, PROGRAM, args, cache, python, timeout_s)


def fetch_command(cache: str, python: str, timeout_s: int) -> str:
    """The transient unit that copies the snapshot from the site's seed (snapshot_fetch.py),
    in the download's unit and log: a later run attaches to it the same way."""
    settings = _settings()
    args = ["--manifest", settings.manifest, "--cache-dir", cache, "--log", settings.log]
    return unit_command(settings.unit, FETCH_PROGRAM, args, cache, python, timeout_s)


def unit_command(
    unit: str,
    program: str,
    args: list[str],
    cache: str,
    python: str,
    timeout_s: int,
    env_file: str | None = None,
    writable: bool = True,
) -> str:
    """``program`` in a transient unit as the service user, sandboxed, stopped after
    ``timeout_s``, its environment from a root-only file (``env_file``, the download's by
    default); ``writable``: the Hub cache and the log's folder may be written."""
    settings = _settings()
    user = download_user()
    properties = [
        f"RuntimeMaxSec={int(timeout_s)}",
        f"EnvironmentFile={env_file or settings.env_file}",
        f"User={user}",
        f"Group={user}",
        *settings.sandbox,
    ]
    if writable:
        properties.append(f"ReadWritePaths={' '.join(writable_paths(cache))}")
    return (
        f"systemd-run --quiet --unit={shlex.quote(unit)} "
        + " ".join(shlex.quote(f"--property={p}") for p in properties)
        + " "
        + unit_exec_words([python, f"{settings.program_dir}/{program}", *args])
    )


def download_env(endpoint: str, cache: str, token: str | None) -> bytes:
    """The download's environment file (systemd's EnvironmentFile syntax)."""
    env = {
        **_settings().environment,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": cache,
        "HF_HOME": cache_dirs()["HF_HOME"],
    }
    if token:
        env["HF_TOKEN"] = token
    lines = [f"{name}={env_value(name, value)}\n" for name, value in sorted(env.items())]
    return (
        "# pyinfra-sglang's model download (roles/model.py); removed after it.\n" + "".join(lines)
    ).encode()


def prepare_command(cache: str) -> str:
    """One round trip before a download: the service user (the service role makes it later;
    the download comes first); the cache and HF_HOME, the user's own (made, or an empty
    folder taken: cache_dirs_checked refused anything else, and no tree is re-owned); the
    program, root's and readable; the env file's root-only folder; the log, the user's,
    emptied."""
    settings = _settings()
    q = shlex.quote
    user = download_user()
    log = settings.log
    program_dir = settings.program_dir
    owned = " ".join(q(f) for f in sorted({cache, cache_dirs()["HF_HOME"]}))
    writes = "".join(
        f"cat > {q(program_dir + '/' + name)} <<'PYINFRA_SGLANG_EOF'\n"
        f"{program_path(name).read_text()}\nPYINFRA_SGLANG_EOF\n"
        f"chmod 644 {q(program_dir + '/' + name)}\n"
        for name in PROGRAMS
    )
    # set -e: a step that fails stops the rest, and the status says so.
    return (
        "set -e\n"
        f"{{ id -u {q(user)} >/dev/null 2>&1 || {useradd_command(user)}; }}\n"
        f"install -d -m 750 -o {q(user)} -g {q(user)} {owned}\n"
        f"install -d -m 755 {q(program_dir)} {q(log.rsplit('/', 1)[0])}\n"
        f"install -d -m 700 {q(settings.env_file.rsplit('/', 1)[0])}\n{writes}"
    )


def _last_line(host_, path: str) -> str:
    ok, out = run_on_host(host_, f"tail -n 1 {shlex.quote(path)} 2>/dev/null || true")
    return out.strip().splitlines()[-1] if ok and out.strip() else ""


def _download(state, host, repo, commit, cache, total, python, endpoint, token_path, timeout_s):
    # pyinfra passes (state, host) to a FunctionCommand function that names them so. The
    # token is read here from its controller file, not passed in: a FunctionCommand's
    # arguments show in pyinfra's debug output.
    token = read_secret(Path(token_path), "hf_token_file", host.name) if token_path else None
    secrets = [s for s in (token, *_login_of(endpoint)) if s]
    env = download_env(endpoint, cache, token)
    start = download_command(repo, commit, cache, total, python, timeout_s)
    return _run_unit(host, repo, commit, cache, timeout_s, env, start, secrets)


def _run_unit(host, repo, commit, cache, timeout_s, env: bytes, start: str, secrets) -> bool:
    """Run the download's unit (``start``, with ``env`` in its root-only env file) unless
    one runs already, print its progress, and judge it by its log's last line."""
    settings = _settings()
    q = shlex.quote
    unit, log = settings.unit, settings.log
    env_file = settings.env_file
    user = download_user()
    ok, out = run_on_host(host, prepare_command(cache))
    if not ok:
        raise OperationError(f"could not prepare the model download: {redact(out, secrets)}")
    try:
        running, _ = run_on_host(host, f"systemctl is-active --quiet {q(unit)}")
        if running:
            logger.info(f"{host.print_prefix}{repo}: a download is running already; waiting for it")
        else:
            put_private_file(host, env, env_file, "600", "the model download's environment")
            run_on_host(
                host,
                f"systemctl reset-failed {q(unit)} 2>/dev/null; "
                f"rm -f {q(log)} && install -m 640 -o {q(user)} -g {q(user)} /dev/null {q(log)}",
            )
            started, out = run_on_host(host, start)
            if not started:
                raise OperationError(f"could not start the model download: {out}")
        printed_at = time.monotonic()

        def ended() -> bool:
            nonlocal printed_at
            active, _ = run_on_host(host, f"systemctl is-active --quiet {q(unit)}")
            if not active:
                return True
            if time.monotonic() - printed_at >= float(settings.print_every_s):
                line = _last_line(host, log)
                logger.info(f"{host.print_prefix}{repo}: {line.split(' ', 1)[-1]}")
                printed_at = time.monotonic()
            return False

        # Past the unit's own timeout (it stops the download), a margin for it to stop.
        wait_until(ended, timeout_s + 120, 2, sleep_first=True)
        last = _last_line(host, log).split(" ", 1)[-1]
        if last.startswith("complete:"):
            logger.info(f"{host.print_prefix}{repo}: {last}")
            return True
        why = last or "no word from the download"
        if not last.startswith("failed:"):
            # Ended without its last word: stopped by its timeout, or killed (the unit's
            # Result says which: "timeout", "signal", ...).
            _, result = run_on_host(host, f"systemctl show -p Result --value {q(unit)}")
            result = result.strip() or "unknown"
            why = (
                f"stopped after {timeout_s} s (sglang_model_download_timeout_s): {why}"
                if result == "timeout"
                else f"the download process ended ({result}) at: {why}"
            )
        logger.error(
            f"{host.print_prefix}{repo} at {commit}: the download failed: "
            f"{redact(why, secrets)}; it resumes on the next run ({log})"
        )
        return False
    finally:
        # systemd read it when the unit started.
        run_on_host(host, f"rm -f {q(env_file)}")


def _login_of(endpoint: str) -> list[str]:
    """An endpoint's user:password, as written and decoded: masked wherever shown."""
    userinfo, at, _ = urllib.parse.urlsplit(endpoint).netloc.rpartition("@")
    if not at:
        return []
    password = userinfo.partition(":")[2]
    words = (userinfo, password)
    return [w for w in {*words, *map(urllib.parse.unquote, words)} if w]


@operation()
def model_ref_recorded(path: str, commit: str):
    """The branch or tag the inventory names, recorded as the commit it stands for, so the
    service, offline, resolves it to the snapshot downloaded (huggingface_hub reads refs/)."""
    if read_once(host, FirstLine, path=path) == commit:
        host.noop(f"{path} holds {commit}")
        return
    q = shlex.quote
    # Written by the service user, as everything in the cache: root writing there would
    # follow a symlink the user planted (roles/service_trees.py).
    yield as_user(
        download_user(),
        f"mkdir -p {q(path.rsplit('/', 1)[0])} && printf '%s' {q(commit)} > {q(path)}",
    )


def start_unit(host_, command: str, env: bytes, env_file: str) -> None:
    """A transient unit started with its environment in a root-only file, removed once
    systemd has read it."""
    q = shlex.quote
    put_private_file(host_, env, env_file, "600", "a transient unit's environment")
    try:
        started, out = run_on_host(host_, command)
        if not started:
            raise OperationError(f"could not start {command.split()[2]}: {out}")
    finally:
        run_on_host(host_, f"rm -f {q(env_file)}")


def _serve_command(python: str):
    """The seed's server unit, as model_site.serve asks for it: the download's user and
    sandbox, nothing writable."""
    settings = _settings()

    def command(program: str, args: list[str], runtime_s: int, env_file: str) -> str:
        return unit_command(
            settings.seed_unit, program, args, "", python, runtime_s, env_file, writable=False
        )

    return command


def _seed_turn(state, host, site, download: tuple | None, cache, folder, python, timeout_s):
    """The site's seed: its own download when it lacks files, then its snapshot served
    until the copying hosts finished. pyinfra passes (state, host) by name."""
    if download is not None and not _download(state, host, *download):
        site.problem = "its own download failed"
        site.ready.set()
        return False
    try:
        # The programs where the unit runs them (a seed whose snapshot was complete has not
        # run the download's preparation in this run).
        ok, out = run_on_host(host, prepare_command(cache))
        if not ok:
            site.problem = "its programs could not be installed"
            site.ready.set()
            raise OperationError(f"could not prepare the snapshot server: {out}")
        model_site.serve(state, host, site, folder, timeout_s, _serve_command(python), start_unit)
    except OperationError as error:
        logger.error(f"{host.print_prefix}{error}")
        return False
    return True


def _copy_from_seed(
    state, host, site, snapshot_manifest: bytes, repo, commit, cache, python, timeout_s
):
    """A host of the site: wait for its seed, then copy the snapshot from it (checked file
    by file) in the download's unit. Never asks the Hub."""
    try:
        model_site.announce_source(state, host, site, python)
        url = model_site.wait_for_seed(state, host, site, timeout_s)
        put_private_file(host, snapshot_manifest, _settings().manifest, "644", "the file list")
        start = fetch_command(cache, python, timeout_s)
        return _run_unit(
            host, repo, commit, cache, timeout_s, model_site.fetch_env(url), start, [site.token]
        )
    except OperationError as error:
        logger.error(f"{host.print_prefix}{redact(str(error), [site.token])}")
        return False
    finally:
        site.finish(host.name)


@operation()
def model_snapshot_downloaded(
    repo: str,
    commit: str,
    files: int,
    total_bytes: int,
    missing_bytes: int,
    cache_dir: str,
    python: str,
    endpoint: str,
    token_file: str | None,
    timeout_s: int,
    site_manifest: bytes | None = None,
):
    """Download what the host's Hub cache lacks of ``repo`` at ``commit`` (see _download);
    a complete snapshot is a no-op. With ``site_manifest`` (model_fetch_once): the site's
    seed downloads and then serves, the others copy from it (roles/model_site.py)."""
    complete = missing_bytes == 0 and files
    download = (repo, commit, cache_dir, total_bytes, python, endpoint, token_file, timeout_s)
    site = model_site.sites(state).get(model_site.site_key(host)) if site_manifest else None
    if site is not None and site.seed == host.name and site.copying:
        folder = snapshot_folder(cache_dir, repo, commit)
        seed = (site, None if complete else download, cache_dir, folder, python, timeout_s)
        yield FunctionCommand(_seed_turn, seed, {})
        return
    if complete:
        host.noop(
            f"{repo} at {commit}: {files} files, {total_bytes / GB:.1f} GB, complete in "
            f"{snapshot_folder(cache_dir, repo, commit)}"
        )
        return
    if site is not None and site.seed != host.name:
        copy = (site, site_manifest, repo, commit, cache_dir, python, timeout_s)
        yield FunctionCommand(_copy_from_seed, copy, {})
        return
    yield FunctionCommand(_download, download, {})


def plan_refusal(host_name: str, error: ModelPlanError, pinned_by: str | None) -> str:
    """Why the Hub's answer stops the run; ``pinned_by``: the profile whose revision was
    asked for (no sglang_model_revision set), which the user may not know they asked."""
    pin = (
        f" (the revision profile {pinned_by} pins; sglang_model_revision names another)"
        if pinned_by
        else ""
    )
    return f"host {host_name}: {error}{pin}. Nothing was changed."


def local_model_checked(path: str) -> None:
    """A local model path must hold a model (its config.json) before anything changes."""
    if not read_once(host, File, path=f"{path.rstrip('/')}/config.json"):
        raise ModelRefused(
            f"host {host.name}: the model {path} is a local path, and {path}/config.json is "
            "not there; copy the model there, or name a Hub repository. Nothing was changed."
        )


def local_model_sized(config, gpus: list[dict]) -> None:
    """An override of ``model`` to a folder the controller could not read (validation warned
    that the profile's size stood for it): sized from the host's own config.json and judged
    on the GPUs found, before anything changes. A fit that fails is refused with its numbers."""
    base = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    overrides = config.sglang_profile_overrides
    if not needs_sizing(base, overrides):
        return
    model = str(overrides["model"])
    try:
        read_model(config, model)
        return  # the controller read it: the profile is sized already
    except ModelSizeError:
        pass
    path = f"{model.rstrip('/')}/config.json"
    limit = data.model_shape().read.max_config_bytes
    found = read_once(host, ModelConfigJson, path=path, limit=limit)
    try:
        if found is None:
            raise ModelShapeError(f"{path} is not a JSON object of at most {limit} bytes")
        shape = shape_of(found)
        read = {**profile_values(shape), **identity_values(model, found, shape)}
        sized = merge_overrides(base, {**read, **overrides})
        if gpus:
            place(sized, gpu_set(gpus, host.name), NodePosition(), config.sglang_version)
    except (ModelShapeError, PyinfraError) as error:
        raise ModelRefused(
            f"host {host.name}: sglang_profile_overrides: model = {model!r}, sized from the "
            f"host's {path}: {error}. Nothing was changed."
        ) from None


def cache_folders(cache: str) -> tuple[str, ...]:
    # HF_HOME holds the default cache, which may be a mount point: judged on its own.
    return tuple(sorted({cache, cache_dirs()["HF_HOME"]}))


def cache_dirs_checked(cache: str) -> None:
    """The Hub cache and HF_HOME as the host has them, before anything changes: no
    symlinked component, no package's folder, and the service user's or empty (the role
    never re-owns a tree: pyinfra_sglang/model_files/cache_dir.py)."""
    user = download_user()
    for found in read_once(host, CacheDirStates, paths=cache_folders(cache), user=user):
        problem = host_problem(found, user)
        if problem:
            raise ModelRefused(
                f"host {host.name}: sglang_model_cache_dir: {problem}. Nothing was changed."
            )


@deploy("Model weights")
def model_weights() -> None:
    """Download the profile's model at a pinned commit, before the service.

    At planning the Hub names the commit and each file's size; a host without room for what it
    lacks is refused. The service user then downloads what the host's Hub cache lacks, in a
    sandboxed transient unit that a later run resumes.

    + sglang_model_revision: the commit, branch or tag (default: the profile's)
    + sglang_model_cache_dir: the host's Hub cache
    + sglang_model_download_timeout_s: seconds before the download is stopped
    + hf_endpoint: the Hub or a mirror
    + hf_token_file: the token, for gated models
    + model_fetch_once: one host a site downloads, the others copy it
    """
    config = host_config(host)
    profile = host_profile(config)
    model = profile.model
    gpus = read_once(host, NvidiaGpus)
    if gpus:
        # GPUs that cannot run the profile are refused first (the service's render checks):
        # no 400 GB download for a host that will not serve it.
        host_service_files(config, gpus)
    if is_local_model(model):
        local_model_checked(model)
        local_model_sized(config, gpus)
        return
    token = read_secret(config.hf_token_file, "hf_token_file", host.name)
    endpoint = str(config.hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")
    revision = model_revision(config.sglang_model_revision, profile.revision)
    try:
        snapshot = hub_snapshot(endpoint, model, revision, token)
    except ModelPlanError as error:
        pinned_by = None if config.sglang_model_revision else profile.revision and profile.name
        raise ModelRefused(plan_refusal(host.name, error, pinned_by)) from None
    if snapshot.commit != revision and (model, revision) not in _reported:
        _reported.add((model, revision))
        logger.warning(
            f"model {model}: revision {revision} is commit {snapshot.commit} now; pin it "
            f"(sglang_model_revision: {snapshot.commit}) so every host serves the same weights"
        )
    cache = hub_cache_dir(config.sglang_model_cache_dir)
    folder = snapshot_folder(cache, model, snapshot.commit)
    # The Hub cache in one command: its folders' owners, the snapshot's files, the ref.
    cache_facts = [
        (CacheDirStates, {"paths": cache_folders(cache), "user": download_user()}),
        (SnapshotFiles, {"folder": folder}),
    ]
    if revision != snapshot.commit:
        cache_facts.append((FirstLine, {"path": ref_file(cache, model, revision)}))
    read_together(host, *cache_facts)
    cache_dirs_checked(cache)
    present = read_once(host, SnapshotFiles, folder=folder)
    missing = snapshot.missing_bytes(present)
    if snapshot.missing(present):
        free = read_once(host, FreeBytes, path=cache)
        need = needed_bytes(missing)
        if free is not None and free < need:
            raise ModelRefused(
                f"host {host.name}: {model} at {snapshot.commit} needs {need / GB:.1f} GB free "
                f"at {cache} ({missing / GB:.1f} GB still to download, plus a margin); "
                f"{free / GB:.1f} GB are free. Free space there first. Nothing was changed."
            )
    site_manifest = None
    if config.model_fetch_once:
        site = model_site.register(state, host, missing=bool(snapshot.missing(present)))
        if site.seed != host.name and not snapshot.blobs:
            raise ModelRefused(
                f"host {host.name}: model_fetch_once copies {model} from {site.seed}, but "
                f"{endpoint} listed no blob ids to check the copies by; unset "
                "model_fetch_once for this host. Nothing was changed."
            )
        site_manifest = model_site.manifest(snapshot)
        if model_site.seeds_others(host):
            packages_installed(name="Install nftables (the seed's firewall)", packages=["nftables"])
    model_snapshot_downloaded(
        name=(
            f"Copy {model} at {snapshot.commit[:12]} from the site's seed"
            if site_manifest and model_site.seed_of(host) != host.name
            else f"Download {model} at {snapshot.commit[:12]}"
        ),
        repo=model,
        commit=snapshot.commit,
        files=len(snapshot.files),
        total_bytes=snapshot.total_bytes,
        missing_bytes=missing if snapshot.missing(present) else 0,
        cache_dir=cache,
        python=f"{config.venv_path.rstrip('/')}/bin/python",
        endpoint=endpoint,
        token_file=str(config.hf_token_file) if config.hf_token_file else None,
        timeout_s=config.sglang_model_download_timeout_s,
        site_manifest=site_manifest,
    )
    if revision != snapshot.commit:
        model_ref_recorded(
            name=f"Record {model}'s {revision} as {snapshot.commit[:12]}",
            path=ref_file(cache, model, revision),
            commit=snapshot.commit,
        )
