"""NVIDIA's Debian packages need the distribution's `contrib`: only the release's own apt
entries get it. Another vendor's repository that names `main` (Grafana's `stable main`,
which the monitoring role writes) is left alone: adding it there made both roles rewrite
that file on every run."""

from __future__ import annotations

from checks.facts import AptSourceEntries
from pyinfra_sglang.parsers.system import parse_apt_source_entries
from roles.nvidia_repo import apt_components
from tests.unit.ophelper import run_operation

SOURCES = [
    "/etc/apt/sources.list\t1\tdeb http://deb.debian.org/debian bookworm main",
    "/etc/apt/sources.list\t2\tdeb http://security.debian.org/debian-security "
    "bookworm-security main",
    "/etc/apt/sources.list.d/grafana.list\t1\tdeb [signed-by=/etc/apt/keyrings/grafana.gpg] "
    "https://apt.grafana.com stable main",
    "/etc/apt/sources.list.d/debian.sources\t1\tTypes: deb",
    "/etc/apt/sources.list.d/debian.sources\t2\tURIs: http://deb.debian.org/debian",
    "/etc/apt/sources.list.d/debian.sources\t3\tSuites: bookworm bookworm-updates",
    "/etc/apt/sources.list.d/debian.sources\t4\tComponents: main",
]


def test_the_parser_reads_each_entrys_suites():
    entries = parse_apt_source_entries(SOURCES)
    assert [e["suites"] for e in entries] == [
        ["bookworm"],
        ["bookworm-security"],
        ["stable"],
        ["bookworm", "bookworm-updates"],
    ]


def test_only_the_releases_own_entries_get_contrib():
    entries = parse_apt_source_entries(SOURCES)
    commands, _ = run_operation(
        apt_components, {AptSourceEntries: entries}, components=["contrib"], codename="bookworm"
    )
    assert commands == [
        "sed -i '1s/[[:space:]]*$/ contrib/' /etc/apt/sources.list",
        "sed -i '2s/[[:space:]]*$/ contrib/' /etc/apt/sources.list",
        "sed -i '4s/[[:space:]]*$/ contrib/' /etc/apt/sources.list.d/debian.sources",
    ]


def test_grafanas_entry_alone_is_a_noop():
    grafana = [e for e in parse_apt_source_entries(SOURCES) if "grafana" in e["file"]]
    commands, noops = run_operation(
        apt_components, {AptSourceEntries: grafana}, components=["contrib"], codename="bookworm"
    )
    assert commands == [] and noops == ["apt sources already have contrib"]
