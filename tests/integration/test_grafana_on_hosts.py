"""Grafana (monitoring_grafana) on a real Debian 12 test host: from a stand-in of Grafana's
apt repository (tests/hosts/grafana_repo.py: the real package name and files, its key taken
by the pinned fingerprint only), its admin password root:grafana 0640 and never in pyinfra's
output or the unit's environment, the Prometheus datasource and the dashboards provisioned,
every dashboard query accepted by the real Prometheus (Debian's) on the host; a second apply
changes nothing."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pytest

from tests.hosts.apply import apply, write_inventory
from tests.integration.test_monitoring_on_hosts import PACKAGES, _api, _targets, _wait

pytestmark = pytest.mark.hosts


GRAFANA_SECRET = "grafana-ADMIN-secret-0123"
ROTATED_SECRET = "grafana-ROTATED-secret-4567"
PASSWORD_APPLIED = "Monitoring | Apply the changed admin password to Grafana's admin user"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The queries of SGLang's dashboard (commit bac2cc67) as the real Prometheus was asked them on
# the H200 machine (docs/monitoring.md), with Grafana's $__rate_interval put back.
REAL_RUN = (
    Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/monitoring/prometheus.json"
)


def _sglang_dashboard() -> str:
    """A dashboard of SGLang's real queries, one panel each (the file itself is SGLang's and
    is not kept here: docs/sources.md)."""
    run = json.loads(REAL_RUN.read_text())
    queries = [
        q["expr"].replace("[30s]", "[$__rate_interval]")
        for q in run["queries"]
        if not q["panel"].startswith(("alert ", "ALERTS"))
    ]
    panels = [
        {"id": n + 1, "type": "timeseries", "targets": [{"refId": "A", "expr": expr}]}
        for n, expr in enumerate(queries)
    ]
    return json.dumps({"title": "SGLang", "panels": panels}, indent=2) + "\n"


@pytest.fixture
def grafana_repo(tmp_path_factory):
    """The stand-in Grafana repository (tests/hosts/grafana_repo.py), a dashboard of SGLang's
    real queries to download as SGLang's, and the same with merge-conflict markers."""
    from tests.hosts.aptrepo import serve
    from tests.hosts.grafana_repo import build_grafana_repo

    root = tmp_path_factory.mktemp("grafana-repo")
    built = build_grafana_repo(root)
    dashboard = _sglang_dashboard()
    (root / "sglang-dashboard.json").write_text(dashboard)
    # As a stored upstream version was: git's merge-conflict markers left in.
    lines = dashboard.splitlines(keepends=True)
    conflicted = lines[:2] + ["<<<<<<< HEAD\n", *lines[2:4], "=======\n", ">>>>>>> b\n"]
    (root / "sglang-dashboard-conflicted.json").write_text("".join(conflicted + lines[4:]))
    with serve(root) as url:
        yield url, built.fingerprint


def _grafana_expressions(text: str) -> list[str]:
    from pyinfra_sglang.monitoring.dashboards import dashboard_expressions

    # Grafana's own variables, as Grafana would fill them in before asking Prometheus.
    return [
        expr.replace("$__rate_interval", "1m").replace("$model_name", ".*")
        for expr in dashboard_expressions(json.loads(text))
    ]


def test_grafana_from_its_repository_with_password_datasource_and_dashboards(
    host_pool, site_hosts, site_data, inventory, grafana_repo, tmp_path
):
    first, second = site_hosts
    url, fingerprint = grafana_repo
    secret = tmp_path / "grafana-admin-password"
    secret.write_text(GRAFANA_SECRET + "\n")
    secret.chmod(0o600)
    # Test hosts sharing this machine's network: no metrics firewall (validation refuses it).
    site_data = {**site_data, "monitoring_firewall": False}
    server = {
        **site_data,
        "sglang_host": first.address,
        "monitoring_role": "server",
        "monitoring_listen_address": first.address,
        "monitoring_exporter_address": first.address,
        "grafana_admin_password_file": str(secret),
        "monitoring_grafana_apt_url": url,
        "monitoring_grafana_key_url": f"{url}/gpg.key",
        "monitoring_grafana_key_fingerprint": fingerprint,
        "monitoring_sglang_dashboard_url": f"{url}/sglang-dashboard.json",
    }
    other = {**site_data, "sglang_host": second.address}
    other["monitoring_exporter_address"] = second.address
    monitoring = write_inventory(
        tmp_path / "grafana.py",
        {"gpu_hosts": [(first.address, server), (second.address, other)]},
    )
    prometheus = f"http://{first.address}:9090"
    try:
        applied = apply(monitoring)
        assert applied.returncode == 0 and not applied.errors(), applied.describe()
        assert GRAFANA_SECRET not in applied.stdout + applied.stderr
        run = lambda command: host_pool.run(first, command).stdout.strip()  # noqa: E731
        assert run("stat -c '%a %U %G' /etc/grafana/pyinfra-sglang-admin-password") == (
            "640 root grafana"
        )
        assert run("cat /etc/grafana/pyinfra-sglang-admin-password") == GRAFANA_SECRET
        keys = run(
            "gpg --batch --show-keys --with-colons /etc/apt/keyrings/grafana.gpg "
            "| awk -F: '/^fpr/ {print $10}' | head -1"
        )
        assert keys == fingerprint
        assert run("systemctl is-active grafana-server") == "active"
        names = run("cat /run/grafana-standin/env-names").split()
        assert {"GF_SECURITY_ADMIN_PASSWORD", "GF_SERVER_HTTP_ADDR"} <= set(names)
        assert run("cat /run/grafana-standin/password") == "readable"
        assert f"{first.address}:3000" in run("ss -ltnH 'sport = :3000'")
        assert GRAFANA_SECRET not in run("systemctl show grafana-server -p Environment")
        datasource = run("cat /etc/grafana/provisioning/datasources/pyinfra-sglang.yml")
        assert f'"http://{first.address}:9090"' in datasource
        dashboards = "/etc/grafana/pyinfra-sglang-dashboards"
        assert run(f"stat -c '%a %U %G' {dashboards} {dashboards}/sglang.json").split("\n") == [
            "750 root grafana",
            "640 root grafana",
        ]
        _wait("Prometheus answering", lambda: _targets(prometheus))
        for name in ("gpus.json", "sglang.json"):
            for expr in _grafana_expressions(run(f"cat {dashboards}/{name}")):
                answer = _api(prometheus, "/api/v1/query", query=expr)
                assert answer["status"] == "success", (name, expr, answer)

        again = apply(monitoring)
        again.assert_unchanged()

        # Grafana's admin password applied with Grafana's own reset, as the grafana user;
        # a changed file is applied again, which Grafana's admin_password alone never does.
        record = "/var/lib/grafana/standin-admin.sha256"
        assert run(f"cat {record} {record}.by").split() == [_sha(GRAFANA_SECRET), "grafana"]
        secret.write_text(ROTATED_SECRET + "\n")
        rotated = apply(monitoring, options=("--limit", first.address))
        assert rotated.returncode == 0 and not rotated.errors(), rotated.describe()
        assert PASSWORD_APPLIED in rotated.changed(first.address), rotated.describe()
        assert ROTATED_SECRET not in rotated.stdout + rotated.stderr
        assert run(f"cat {record} {record}.by").split() == [_sha(ROTATED_SECRET), "grafana"]
        apply(monitoring, options=("--limit", first.address)).assert_unchanged()

        # The grafana user swaps every path it can for a symlink to a root-only file while
        # the dashboard is downloaded again: nothing outside its tree changes (issue 46).
        canary = "/etc/pyinfra-sglang-canary"
        run(f"printf 'root only\\n' > {canary} && chmod 600 {canary}")
        before_canary = run(f"stat -c '%a %U %G %s' {canary}; sha256sum {canary}")
        old = "/var/lib/grafana/dashboards"
        swaps = (
            f"ln -sfn {canary} {old}/.pyinfra-sglang-sglang.json.new; "
            f"ln -sfn {canary} {old}/.pyinfra-sglang-sglang.json.source; "
            f"ln -sfn /etc {old}/pyinfra-sglang; "
            f"ln -sfn {canary} /var/lib/pyinfra-sglang/grafana/sglang.json.new 2>/dev/null; "
        )
        run(
            "systemd-run --unit=grafana-swapper --uid=grafana --collect /bin/sh -c "
            + shlex.quote(f"mkdir -p {old}; for i in $(seq 1 4000); do {swaps} done")
        )
        run("rm -f /var/lib/pyinfra-sglang/grafana/sglang.json.source")  # download again
        try:
            swapped = apply(monitoring, options=("--limit", first.address))
        finally:
            run("systemctl stop grafana-swapper 2>/dev/null; true")
        assert swapped.returncode == 0 and not swapped.errors(), swapped.describe()
        assert "SGLang's dashboard for SGLang" in " ".join(swapped.changed(first.address))
        assert run(f"stat -c '%a %U %G %s' {canary}; sha256sum {canary}") == before_canary
        assert run(f"cat {canary}") == "root only"
        assert run("stat -c '%a %U %G' /var/lib/pyinfra-sglang/grafana") == "700 root root"
        assert run(f"stat -c '%a %U %G' {dashboards}/sglang.json") == "640 root grafana"
        assert (
            run(f"sha256sum < {dashboards}/sglang.json").split()[0]
            == hashlib.sha256(_sglang_dashboard().encode()).hexdigest()
        )

        # A dashboard with merge-conflict markers is refused: the one in place is kept.
        before = run(f"sha256sum {dashboards}/sglang.json")
        conflicted = f"{url}/sglang-dashboard-conflicted.json"
        refused = apply(
            monitoring,
            "roles.monitoring.sglang_dashboard_installed",
            f"url={conflicted}",
            options=("--limit", first.address),
        )
        assert refused.returncode != 0, refused.describe()
        output = refused.stdout + refused.stderr
        assert f"host {first.address}: SGLang's dashboard from {conflicted} refused" in output
        assert "git merge-conflict marker '<<<<<<<' on line 3" in output, output
        assert run(f"sha256sum {dashboards}/sglang.json") == before
        staging = "/var/lib/pyinfra-sglang/grafana/sglang.json.new"
        assert run(f"test -e {staging} && echo left || echo gone") == "gone"
    finally:
        for h in site_hosts:
            host_pool.run(
                h,
                "systemctl disable --now grafana-server prometheus prometheus-node-exporter "
                "2>/dev/null; DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "
                f"grafana {PACKAGES} >/dev/null 2>&1; "
                "rm -rf /etc/default/prometheus /etc/default/prometheus-node-exporter "
                "/etc/prometheus /etc/grafana /var/lib/grafana /var/lib/pyinfra-sglang "
                "/etc/pyinfra-sglang-canary /etc/apt/keyrings/grafana.gpg "
                "/etc/apt/sources.list.d/grafana.list "
                "/etc/systemd/system/grafana-server.service.d; systemctl daemon-reload; "
                "apt-get update -q >/dev/null 2>&1",
                check=False,
            )
