"""Monitoring (inventory ``monitoring_role``, off by default; docs/monitoring.md): with one
host of the inventory its monitoring server, every host runs Debian's node exporter (and,
with DCGM, NVIDIA's DCGM exporter) on the address the inventory says, and the server runs
Debian's Prometheus, scraping what pyinfra_sglang/monitoring/ plans, with the alert rules
of data/monitoring.toml, and Grafana from Grafana's apt repository with its datasource and
dashboards provisioned."""

from __future__ import annotations

import hashlib
import io
import shlex

from pyinfra import host
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.files import Sha256File
from pyinfra.facts.server import Command
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from checks.facts import read_once
from checks.host_context import run_on_host, transfer_arguments
from pyinfra_sglang import data
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.inventory.monitoring import inventory_plan
from pyinfra_sglang.monitoring import render
from pyinfra_sglang.monitoring.dashboards import dashboard_refusal, gpu_dashboard_json
from pyinfra_sglang.monitoring.targets import JOB_DCGM, MonitoringPlan
from pyinfra_sglang.serving.secret_files import read_secret
from roles.common import apt_lists_updated, ensure_packages, upload_into
from roles.dcgm import dcgm_plan
from roles.nvidia_repo import installed_keys_command, primary_fingerprints
from roles.service_trees import as_user, install_staged, root_only_folder


def _sha256(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(raw).hexdigest()


def _put(name: str, text: str, dest: str, mode: str = "644", group: str = "root"):
    return files.put(
        name=name, src=io.StringIO(text), dest=dest, user="root", group=group, mode=mode
    )


@operation()
def prometheus_config_installed(config: str, rules: str):
    """prometheus.yml and its rules file, replaced only as a pair that ``promtool check
    config`` accepts (it checks the rules file it names too): both are staged beside the
    config, checked there, then moved into place. A config promtool refuses never replaces
    the running one; the run fails with promtool's words.

    + config: prometheus.yml's text
    + rules: the alert rules file's text
    """
    settings = data.monitoring().prometheus
    wanted = {settings.config: config, settings.rules: rules}
    stale = [
        path
        for path, text in wanted.items()
        if read_once(host, Sha256File, path=path) != _sha256(text)
    ]
    if not stale:
        host.noop("prometheus.yml and its alert rules are as rendered")
        return
    staging = settings.staging
    q = shlex.quote
    yield StringCommand(f"rm -rf {q(staging)} && install -d -m 755 {q(staging)}")
    for path, text in wanted.items():
        staged = f"{staging}/{path.rsplit('/', 1)[-1]}"
        yield FunctionCommand(_upload, (text.encode(), staged), {})
    staged_config = f"{staging}/{settings.config.rsplit('/', 1)[-1]}"
    moves = " && ".join(
        f"install -m 644 -o root -g root {q(staging + '/' + p.rsplit('/', 1)[-1])} {q(p)}"
        for p in wanted
    )
    yield StringCommand(
        f"{q(settings.promtool)} check config {q(staged_config)} >&2 || "
        f"{{ echo 'promtool refused the rendered config: the running one is kept' >&2; "
        f"rm -rf {q(staging)}; exit 1; }}; {moves} && rm -rf {q(staging)}"
    )


def _upload(state, host, content: bytes, path: str) -> bool:
    ok, out = run_on_host(host, f"install -m 644 /dev/null {shlex.quote(path)}")
    if not ok:
        raise OperationError(f"could not stage {path}: {out}")
    upload_into(host, content, path, path)
    return True


@operation()
def grafana_keyring(key_url: str, fingerprint: str, keyring: str):
    """Grafana's repository key at ``keyring``: from the key file at ``key_url``, only the key
    of ``fingerprint`` is exported into it (a file of other keys, or without it, fails the
    run and installs nothing). A keyring holding that key alone is not touched.

    + key_url: the armored key file (https://apt.grafana.com/gpg.key)
    + fingerprint: the key's pinned fingerprint (data/monitoring.toml, or the inventory's)
    + keyring: where apt's signed-by reads it
    """
    present = read_once(host, Command, command=installed_keys_command(keyring))
    if (present or "").split() == [fingerprint]:
        host.noop(f"{keyring} holds Grafana's key {fingerprint} alone")
        return
    q = shlex.quote
    protocols = "=https" if key_url.startswith("https://") else "=http,https"
    listing = primary_fingerprints('"$dir/key.gpg"', '"$dir/check"')
    yield StringCommand(
        f'dir=$(mktemp -d) && chmod 700 "$dir" && mkdir -m 700 "$dir/gnupg" "$dir/check" && '
        f'curl -fsSL --proto {protocols} -o "$dir/key.asc" {q(key_url)} && '
        f'GNUPGHOME="$dir/gnupg" gpg --batch --quiet --import "$dir/key.asc" 2>/dev/null; '
        f'GNUPGHOME="$dir/gnupg" gpg --batch --export {q(fingerprint)} > "$dir/key.gpg"; '
        f"keys=$({listing}); "
        # The URL and fingerprint reach the message as quoted words, never inside "...":
        # a URL may hold $( ) or backquotes, which a double-quoted string would run.
        f'if [ "$keys" != {q(fingerprint)} ]; then printf "%s%s%s\\n" '
        f'{q(f"the key file at {key_url} has no key {fingerprint} (found: ")} "$(echo $keys)" '
        f"{q('): not installing it')} >&2; "
        f'rm -rf "$dir"; exit 1; fi; '
        f'install -D -m 644 -o root -g root "$dir/key.gpg" {q(keyring)}; '
        f'status=$?; rm -rf "$dir"; exit $status'
    )


def _installed_from_command(dest: str, source: str) -> str:
    q = shlex.quote
    return (
        f"if [ -f {q(dest)} ] && [ -f {q(source)} ]; then "
        f"cat {q(source)}; sha256sum {q(dest)}; fi; true"
    )


def _installed_from(present: str | None, url: str) -> bool:
    """Does ``present`` (_installed_from_command's output) say the dashboard in place is the
    one checked and installed from ``url``, unchanged since?"""
    lines = (present or "").split("\n")
    if len(lines) < 2 or not lines[1].split():
        return False
    return lines[0].strip().rsplit(" ", 1) == [url, lines[1].split()[0]]


@operation()
def sglang_dashboard_installed(url: str):
    """SGLang's Grafana dashboard from ``url``: downloaded to a staging file on the host, read
    back and checked here (dashboards.dashboard_refusal: JSON of a dashboard with panels,
    every query's metric one checked against the release, no merge-conflict markers), and
    only then moved into the provisioned folder. A refused file is deleted, the dashboard in
    place is kept and the run fails naming the host and the URL. One installed from the same
    URL and unchanged since is not downloaded again.

    + url: the dashboard's JSON (the tag of sglang_version, or monitoring_sglang_dashboard_url)
    """
    settings = data.monitoring().grafana
    dest, source = settings.sglang_dashboard, settings.sglang_dashboard_source
    present = read_once(host, Command, command=_installed_from_command(dest, source))
    if _installed_from(present, url):
        host.noop(f"{dest} is SGLang's dashboard from {url}, checked")
        return
    q = shlex.quote
    staging = settings.sglang_dashboard_staging
    protocols = "=https" if url.startswith("https://") else "=http,https"
    failed = f"could not download SGLang's dashboard from {url}: the current one is kept"
    # Staged and recorded in a root-only folder, installed into root's folder Grafana reads:
    # no path root acts on is one the grafana user can swap (roles/service_trees.py).
    yield StringCommand(
        f"{root_only_folder(settings.staging_dir)} && rm -f {q(staging)} && "
        f"curl -fsSL --proto {protocols} -o {q(staging)} {q(url)} || "
        f"{{ echo {q(failed)} >&2; rm -f {q(staging)}; exit 1; }}"
    )
    yield FunctionCommand(_dashboard_checked, (url, staging), {})
    yield StringCommand(
        f"sum=$(sha256sum {q(staging)} | cut -d ' ' -f 1) && "
        f"{install_staged(staging, dest, 'root', 'grafana', '640')} && "
        f'printf "%s %s\\n" {q(url)} "$sum" > {q(source)}'
    )


@operation()
def grafana_old_dashboards_removed(user: str, paths: list[str]):
    """The dashboards folder and files of earlier releases, under Grafana's own tree,
    removed by ``user`` (grafana) itself: root acts on no path there. A no-op when none is
    there.

    + user: the user that owns the tree (grafana)
    + paths: the old folder and files (data/monitoring.toml [grafana] old_dashboard_paths)
    """
    q = shlex.quote
    present = read_once(
        host, Command, command=" ".join(["ls", "-d", *map(q, paths), "2>/dev/null; true"])
    )
    if not (present or "").strip():
        host.noop("no dashboards of an earlier release under Grafana's tree")
        return
    yield StringCommand(as_user(user, f"rm -rf -- {' '.join(q(p) for p in paths)}"))


def _dashboard_checked(state, host, url: str, staging: str) -> bool:
    buffer = io.BytesIO()
    with transfer_arguments(host) as transfer:
        read = host.get_file(staging, buffer, **transfer(staging))
    if not read:
        raise OperationError(f"host {host.name}: could not read back {staging}")
    reason = dashboard_refusal(buffer.getvalue())
    if reason is None:
        return True
    run_on_host(host, f"rm -f {shlex.quote(staging)}")
    raise OperationError(
        f"host {host.name}: SGLang's dashboard from {url} refused: {reason}; the dashboard "
        "in place is kept (monitoring_sglang_dashboard_url names another)"
    )


@operation()
def grafana_password_installed(path: str):
    """Grafana's admin password at ``path``, root:grafana 0640, from the controller file
    grafana_admin_password_file; read here, never passed as an argument or shown. A file
    holding it already is not touched.

    + path: the file Grafana's $__file{} reads (data/monitoring.toml [grafana])
    """
    config = host_config(host)
    secret = read_secret(
        config.grafana_admin_password_file, "grafana_admin_password_file", host.name
    )
    if secret is None:  # validation requires it: a guard, never reached
        raise OperationError("grafana_admin_password_file is not set")
    if read_once(host, Sha256File, path=path) == _sha256(secret):
        host.noop(f"{path} holds the admin password")
        return
    yield FunctionCommand(_password_written, (path,), {})


def _password_written(state, host, path: str) -> bool:
    # Read again here: a FunctionCommand's arguments show in pyinfra's debug output.
    config = host_config(host)
    secret = read_secret(
        config.grafana_admin_password_file, "grafana_admin_password_file", host.name
    )
    q = shlex.quote
    staging = path + ".pyinfra-sglang-new"
    ok, out = run_on_host(
        host, f"rm -f {q(staging)} && install -m 640 -o root -g grafana /dev/null {q(staging)}"
    )
    if not ok:
        raise OperationError(f"could not prepare Grafana's password file: {out}")
    upload_into(host, (secret or "").encode(), staging, "Grafana's admin password")
    ok, out = run_on_host(host, f"mv -f {q(staging)} {q(path)}")
    if not ok:
        raise OperationError(f"could not install Grafana's password file: {out}")
    return True


@operation(is_idempotent=False)
def grafana_password_applied(path: str):
    """The admin password in ``path`` applied to Grafana's admin user with Grafana's own
    reset (data/monitoring.toml [grafana] password_reset), run as the grafana user, the
    password on stdin. Grafana reads admin_password only when it creates the admin user:
    without this, a changed password file would change nothing. Run only when the file
    changed (``_if``).

    + path: the password file (root:grafana 0640), read by root's shell into stdin
    """
    settings = data.monitoring().grafana
    q = shlex.quote
    reset = " ".join(q(word) for word in settings.password_reset)
    yield StringCommand(f"{as_user(settings.user, reset)} < {q(path)}")


def _running(what: str, service: str, restart: str, changed):
    """``service`` enabled and running, restarted (``restart``: the operation's name) when
    ``changed`` (an operation, or any_changed of several) changed what it reads. Gives both
    operations: a caller that reloads must know whether this run (re)started it."""
    started = systemd.service(
        name=f"{what} enabled and running", service=service, running=True, enabled=True
    )
    restarted = systemd.service(name=restart, service=service, restarted=True, _if=changed)
    return started, restarted


def reload_needed(changed, *starts):
    """The `_if` of a reload: ``changed`` changed and none of ``starts`` (re)started the
    service in this run. A process just started reads its config anyway, and a SIGHUP sent
    before it handles one ends it: Go exits on SIGHUP by default, and systemd's
    Restart=on-failure counts an end by SIGHUP as clean, so it stays down."""
    return lambda: changed.did_change() and not any_changed(*starts)()


def node_exporter(plan: MonitoringPlan) -> None:
    """Debian's node exporter, listening only on the address the plan gives this host."""
    settings = data.monitoring().node_exporter
    address = plan.exporters[host.name]
    # Before the package: its postinst starts it, on every address unless this file says.
    defaults = _put(
        f"Node exporter listens on {address} only",
        render.node_exporter_defaults(address, plan.server),
        settings.defaults,
    )
    ensure_packages("Install the node exporter", [settings.package])
    _running(
        "Node exporter",
        settings.service,
        "Restart the node exporter on its new address",
        defaults.did_change,
    )


def dcgm_exporter(plan: MonitoringPlan) -> None:
    """NVIDIA's DCGM exporter from NVIDIA's repository, where DCGM comes from there too,
    listening only on the address of this host's DCGM target in the plan."""
    config = host_config(host)
    target = plan.target(JOB_DCGM, host.name)
    package, _ = dcgm_plan(config.nvidia_dcgm_install, config.uses_host_driver, config.cuda_version)
    if target is None or package is None:
        return
    settings = data.monitoring().dcgm_exporter
    # Before the package, so that a start by its scripts already reads it.
    dropin = _put(
        f"DCGM exporter listens on {target.address} only",
        render.dcgm_exporter_dropin(target.address, plan.server),
        settings.dropin,
    )
    ensure_packages("Install the DCGM exporter", [settings.package])
    systemd.daemon_reload(
        name="Reload systemd for the DCGM exporter's drop-in", _if=dropin.did_change
    )
    _running(
        "DCGM exporter",
        settings.service,
        "Restart the DCGM exporter on its new address",
        dropin.did_change,
    )


def prometheus(plan: MonitoringPlan, listen: str) -> None:
    settings = data.monitoring().prometheus
    # Before the package, whose postinst starts it (on every address unless this says).
    defaults = _put(
        f"Prometheus listens on {listen} only",
        render.prometheus_defaults(listen),
        settings.defaults,
    )
    ensure_packages("Install Prometheus", [settings.package])
    config = prometheus_config_installed(
        name=f"Prometheus scrapes {len(plan.targets)} targets, with the alert rules",
        config=render.prometheus_config(plan, listen),
        rules=render.alert_rules_file(plan),
    )
    starts = _running(
        "Prometheus", settings.service, "Restart Prometheus on its new address", defaults.did_change
    )
    systemd.service(
        name="Reload Prometheus's config",
        service=settings.service,
        reloaded=True,
        _if=reload_needed(config, *starts),
    )


def grafana(listen: str) -> None:
    config = host_config(host)
    settings = data.monitoring().grafana
    repo = str(config.monitoring_grafana_apt_url or settings.repo_url).rstrip("/")
    key = grafana_keyring(
        name="Grafana's repository key, by its fingerprint",
        key_url=str(config.monitoring_grafana_key_url or settings.key_url),
        fingerprint=config.monitoring_grafana_key_fingerprint or settings.key_fingerprint,
        keyring=settings.keyring,
    )
    line = (
        f"deb [signed-by={settings.keyring}] {repo} {settings.suite} "
        f"{' '.join(settings.components)}\n"
    )
    sources = _put("Grafana's apt repository", line, settings.sources_list)
    apt_lists_updated(
        name="Refresh apt's lists for Grafana's repository",
        _if=any_changed(key, sources),
    )
    ensure_packages("Install Grafana", [settings.package])
    password = grafana_password_installed(
        name="Grafana's admin password, from grafana_admin_password_file",
        path=settings.password_file,
    )
    grafana_password_applied(
        name="Apply the changed admin password to Grafana's admin user",
        path=settings.password_file,
        _if=password.did_change,
    )
    dropin = _put(
        f"Grafana listens on {listen} only, its password from a file",
        render.grafana_dropin(listen),
        settings.dropin,
    )
    systemd.daemon_reload(name="Reload systemd for Grafana's drop-in", _if=dropin.did_change)
    provisioning = settings.provisioning
    datasource = _put(
        "Grafana's Prometheus datasource",
        render.grafana_datasource(listen),
        f"{provisioning}/datasources/pyinfra-sglang.yml",
        mode="640",
        group="grafana",
    )
    provider = _put(
        "Grafana's dashboards folder",
        render.grafana_dashboards_provider(),
        f"{provisioning}/dashboards/pyinfra-sglang.yml",
        mode="640",
        group="grafana",
    )
    files.directory(
        name="Folder of the provisioned dashboards",
        path=settings.dashboards_dir,
        user="root",
        group="grafana",
        mode="750",
    )
    grafana_old_dashboards_removed(
        name="Dashboards of earlier releases, under Grafana's tree, removed by grafana",
        user="grafana",
        paths=list(settings.old_dashboard_paths),
    )
    gpu = _put(
        "GPU dashboard (DCGM exporter)",
        gpu_dashboard_json(),
        f"{settings.dashboards_dir}/gpus.json",
        mode="640",
        group="grafana",
    )
    url = str(config.monitoring_sglang_dashboard_url or "") or settings.sglang_dashboard_url.format(
        version=config.sglang_version
    )
    sglang = sglang_dashboard_installed(
        name=f"SGLang's dashboard for SGLang {config.sglang_version}, checked", url=url
    )
    _running(
        "Grafana",
        settings.service,
        "Restart Grafana for its changed settings",
        any_changed(password, dropin, datasource, provider, gpu, sglang),
    )


@deploy("Monitoring")
def monitoring() -> None:
    """Run Prometheus, Grafana and node exporters for the inventory's monitoring host.

    Every host gets Debian's node exporter (and NVIDIA's DCGM exporter with DCGM); the
    server Prometheus with the targets and alert rules (replaced only when promtool
    accepts them), and Grafana. No server: no change.

    + monitoring_role: `server` on the monitoring host; `off` everywhere else
    + monitoring_listen_address: where Prometheus and Grafana listen, on the server
    + monitoring_exporter_address: where this host's node and DCGM exporters listen
    + nvidia_dcgm_install: adds the DCGM exporter
    + monitoring_grafana: off leaves Grafana out
    + grafana_admin_password_file: Grafana's admin password, never on a command line
    """
    inventory = host.inventory
    plan = inventory_plan(inventory, {h.name: host_config(h) for h in inventory})
    if plan is None:
        host.noop('no monitoring (no host has monitoring_role = "server")')
        return
    node_exporter(plan)
    dcgm_exporter(plan)
    config = host_config(host)
    if host.name != plan.server:
        return
    listen = str(config.monitoring_listen_address)
    prometheus(plan, listen)
    if config.monitoring_grafana:
        grafana(listen)
