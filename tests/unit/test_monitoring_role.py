"""roles/monitoring.py's own operations, against given facts: what they yield, and that a
host already as rendered is not touched."""

from __future__ import annotations

import hashlib
import shlex

import pytest
from pyinfra.facts.files import Sha256File
from pyinfra.facts.server import Command

from pyinfra_sglang import data
from roles.monitoring import (
    grafana_keyring,
    prometheus_config_installed,
    reload_needed,
    sglang_dashboard_installed,
)
from tests.unit.ophelper import run_operation

CONFIG, RULES = "global: {}\n", "groups: []\n"
FINGERPRINT = "B53AE77BADB630A683046005963FA27710458545"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _files(config: str | None, rules: str | None):
    known = {
        "/etc/prometheus/prometheus.yml": config and _sha(config),
        "/etc/prometheus/sglang-alerts.yml": rules and _sha(rules),
    }
    return lambda path: known[path]


def test_a_config_as_rendered_is_not_touched():
    commands, noops = run_operation(
        prometheus_config_installed, {Sha256File: _files(CONFIG, RULES)}, config=CONFIG, rules=RULES
    )
    assert commands == [] and noops == ["prometheus.yml and its alert rules are as rendered"]


def test_a_changed_rules_file_is_checked_by_promtool_before_it_replaces_the_running_one():
    commands, noops = run_operation(
        prometheus_config_installed,
        {Sha256File: _files(CONFIG, "old\n")},
        config=CONFIG,
        rules=RULES,
    )
    assert noops == []
    last = commands[-1]
    check = last.index("/usr/bin/promtool check config")
    assert check < last.index("install -m 644 -o root -g root")
    assert "the running one is kept" in last and "exit 1" in last
    assert "/etc/prometheus/.pyinfra-sglang-staging/prometheus.yml" in last


def test_grafanas_key_already_there_alone_is_not_touched():
    commands, noops = run_operation(
        grafana_keyring,
        {Command: FINGERPRINT + "\n"},
        key_url="https://apt.grafana.com/gpg.key",
        fingerprint=FINGERPRINT,
        keyring="/etc/apt/keyrings/grafana.gpg",
    )
    assert commands == [] and "alone" in noops[0]


def test_only_the_pinned_key_is_exported_into_the_keyring():
    commands, _ = run_operation(
        grafana_keyring,
        {Command: ""},
        key_url="https://apt.grafana.com/gpg.key",
        fingerprint=FINGERPRINT,
        keyring="/etc/apt/keyrings/grafana.gpg",
    )
    (command,) = commands
    assert f"gpg --batch --export {FINGERPRINT}" in command
    assert "--proto =https" in command
    assert command.index("not installing it") < command.index("install -D -m 644")


DASHBOARD_URL = (
    "https://raw.githubusercontent.com/sgl-project/sglang/v0.5.17/x/sglang-dashboard.json"
)
DASHBOARD = "/etc/grafana/pyinfra-sglang-dashboards/sglang.json"


def test_sglangs_dashboard_from_the_same_url_unchanged_is_not_downloaded_again():
    installed = f"{DASHBOARD_URL} {'a' * 64}\n{'a' * 64}  {DASHBOARD}"
    commands, noops = run_operation(
        sglang_dashboard_installed, {Command: installed}, url=DASHBOARD_URL
    )
    assert commands == [] and noops == [
        f"{DASHBOARD} is SGLang's dashboard from {DASHBOARD_URL}, checked"
    ]


@pytest.mark.parametrize(
    "present",
    [
        "",  # never installed
        f"{DASHBOARD_URL} {'a' * 64}\n{'b' * 64}  {DASHBOARD}",  # edited on the host
        f"https://mirror.example/d.json {'a' * 64}\n{'a' * 64}  {DASHBOARD}",  # another URL
    ],
)
def test_sglangs_dashboard_is_staged_checked_then_moved_into_place(present):
    commands, noops = run_operation(
        sglang_dashboard_installed, {Command: present}, url=DASHBOARD_URL
    )
    assert noops == []
    download, check, move = commands
    # Staged in a root-only folder, installed into root's folder: Grafana's user owns
    # /var/lib/grafana and could swap a path there for a symlink (issue 46).
    staging = "/var/lib/pyinfra-sglang/grafana/sglang.json.new"
    assert download.startswith("install -d -m 700 -o root -g root /var/lib/pyinfra-sglang/grafana")
    assert f"curl -fsSL --proto =https -o {staging} {DASHBOARD_URL}" in download
    assert "_dashboard_checked" in check
    install = f"install -m 640 -o root -g grafana {staging} {DASHBOARD}"
    assert move.index(install) < move.index("printf")
    assert "/var/lib/pyinfra-sglang/grafana/sglang.json.source" in move
    assert "/var/lib/grafana" not in " ".join(commands)
    assert DASHBOARD not in download


def test_old_dashboards_under_grafanas_tree_are_removed_by_grafana_itself():
    from roles.monitoring import grafana_old_dashboards_removed

    old = ["/var/lib/grafana/dashboards/pyinfra-sglang", "/var/lib/grafana/dashboards/.x.new"]
    commands, noops = run_operation(
        grafana_old_dashboards_removed, {Command: old[0] + "\n"}, user="grafana", paths=old
    )
    # root never acts in a tree the grafana user owns: the user removes its own files.
    assert (
        commands
        == [
            "runuser -u grafana -- sh -c 'rm -rf -- /var/lib/grafana/dashboards/pyinfra-sglang "
            "/var/lib/grafana/dashboards/.x.new'"
        ]
        and noops == []
    )
    commands, noops = run_operation(
        grafana_old_dashboards_removed, {Command: ""}, user="grafana", paths=old
    )
    assert commands == [] and noops == ["no dashboards of an earlier release under Grafana's tree"]


def test_a_changed_password_is_applied_by_grafana_as_grafana_from_stdin():
    from roles.monitoring import grafana_password_applied

    path = "/etc/grafana/pyinfra-sglang-admin-password"
    [command], noops = run_operation(grafana_password_applied, {}, path=path)
    assert noops == []
    assert command.startswith("runuser -u grafana -- sh -c ")
    assert command.endswith(f" < {path}")  # root's shell opens root's file: stdin only
    words = shlex.split(command)
    assert words[:6] == ["runuser", "-u", "grafana", "--", "sh", "-c"] and words[-2:] == ["<", path]
    # The inner command as Grafana's CLI is given it: one word for all the config overrides.
    assert shlex.split(words[6]) == list(data.monitoring().grafana.password_reset)


class _Op:
    def __init__(self, changed: bool):
        self.changed = changed

    def did_change(self) -> bool:
        return self.changed


@pytest.mark.parametrize(
    ("config", "started", "restarted", "reload"),
    [
        (True, False, False, True),
        (False, False, False, False),
        # Just (re)started: it reads the new config, and a SIGHUP before its handler is in
        # place ended Prometheus for good (Go's default; systemd counts it as a clean end).
        (True, True, False, False),
        (True, False, True, False),
    ],
)
def test_prometheus_is_reloaded_only_where_this_run_did_not_just_start_it(
    config, started, restarted, reload
):
    assert reload_needed(_Op(config), _Op(started), _Op(restarted))() is reload
