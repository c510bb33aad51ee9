"""A signed stand-in for Grafana's apt repository (`deb URL stable main`, the layout of
https://apt.grafana.com): one package named `grafana`, with the files Grafana's Debian
package installs per Grafana's install docs ("Package details": the grafana-server systemd
service, /etc/default/grafana-server, /etc/grafana/grafana.ini, /usr/share/grafana,
/var/lib/grafana, /var/log/grafana; its postinst makes the grafana user and group and the
/etc/grafana/provisioning folders), and the repository's armored key at /gpg.key.

Its grafana-server is a test double: a static HTTP server on GF_SERVER_HTTP_ADDR and
GF_SERVER_HTTP_PORT (the role's drop-in sets them), answering /api/health, and recording the
environment variable names it was started with (never values) in /run/grafana-standin.env."""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.hosts.aptrepo import DebFile, PackageSpec, SigningKey, build_deb, script

VERSION = "12.3.0"

SERVICE = b"""[Unit]
Description=Grafana instance (test double)
After=network-online.target

[Service]
EnvironmentFile=/etc/default/grafana-server
User=grafana
Group=grafana
Type=simple
ExecStart=/usr/share/grafana/bin/grafana server --homepath=/usr/share/grafana
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

SERVER = script(
    "env | cut -d= -f1 | sort > /run/grafana-standin/env-names\n"
    'test -r "${GF_PASSWORD_CHECK:-/etc/grafana/pyinfra-sglang-admin-password}" '
    "&& echo readable > /run/grafana-standin/password || echo unreadable > "
    "/run/grafana-standin/password\n"
    'exec python3 -m http.server --bind "${GF_SERVER_HTTP_ADDR:-0.0.0.0}" '
    '"${GF_SERVER_HTTP_PORT:-3000}" --directory /usr/share/grafana/public\n'
)

POSTINST = script(
    "set -e\n"
    "getent group grafana >/dev/null || groupadd --system grafana\n"
    "getent passwd grafana >/dev/null || useradd --system -g grafana "
    "-d /usr/share/grafana -s /bin/false grafana\n"
    "for d in datasources dashboards plugins notifiers alerting; do\n"
    "  install -d -m 755 -o root -g grafana /etc/grafana/provisioning/$d\n"
    "done\n"
    "install -d -m 755 -o grafana -g grafana /var/lib/grafana /var/log/grafana\n"
    "chown root:grafana /etc/grafana /etc/grafana/grafana.ini\n"
    "printf 'd /run/grafana-standin 0755 grafana grafana -\\n' "
    "> /usr/lib/tmpfiles.d/grafana-standin.conf\n"
    "systemd-tmpfiles --create /usr/lib/tmpfiles.d/grafana-standin.conf || true\n"
    "exit 0\n"
)


def grafana_package() -> PackageSpec:
    files = (
        DebFile("/usr/share/grafana/bin/grafana", SERVER, 0o755),
        DebFile("/usr/share/grafana/public/api/health", b'{"database": "ok"}\n'),
        DebFile(
            "/usr/sbin/grafana-server",
            script('exec /usr/share/grafana/bin/grafana server "$@"\n'),
            0o755,
        ),
        DebFile("/usr/lib/systemd/system/grafana-server.service", SERVICE),
        DebFile("/etc/default/grafana-server", b"GRAFANA_USER=grafana\nGRAFANA_GROUP=grafana\n"),
        DebFile("/etc/grafana/grafana.ini", b"; Grafana's configuration (test double)\n"),
    )
    return PackageSpec(
        "grafana",
        VERSION,
        "amd64",
        "Grafana",
        files=files,
        conffiles=("/etc/default/grafana-server", "/etc/grafana/grafana.ini"),
        scripts=(("postinst", POSTINST),),
    )


@dataclass(frozen=True)
class GrafanaRepo:
    root: Path
    fingerprint: str


def build_grafana_repo(root: Path) -> GrafanaRepo:
    """dists/stable/{InRelease,Release,Release.gpg}, dists/stable/main/binary-amd64/Packages,
    pool/grafana_VERSION_amd64.deb and gpg.key (armored), signed by a new key."""
    pool = root / "pool"
    binary = root / "dists/stable/main/binary-amd64"
    pool.mkdir(parents=True)
    binary.mkdir(parents=True)
    spec = grafana_package()
    with tempfile.TemporaryDirectory(prefix="grafana-stage-") as work:
        deb = build_deb(spec, pool, Path(work))
    raw = deb.read_bytes()
    stanza = (
        spec.control()
        + f"Filename: pool/{deb.name}\nSize: {len(raw)}\n"
        + f"SHA256: {hashlib.sha256(raw).hexdigest()}\n"
    ).encode()
    (binary / "Packages").write_bytes(stanza)
    (binary / "Packages.gz").write_bytes(gzip.compress(stanza, mtime=0))
    dist = root / "dists/stable"
    indexes = [binary / "Packages", binary / "Packages.gz"]
    sha = "".join(
        f" {hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_size} {p.relative_to(dist)}\n"
        for p in indexes
    )
    now = email.utils.format_datetime(datetime.now(UTC), usegmt=True)
    (dist / "Release").write_text(
        "Origin: Grafana (test double)\nLabel: Grafana\nSuite: stable\nCodename: stable\n"
        f"Architectures: amd64\nComponents: main\nDate: {now}\nSHA256:\n{sha}"
    )
    with SigningKey() as key:
        key.sign_release(dist)
        armored = key._gpg("--armor", "--export", key.fingerprint).stdout
        (root / "gpg.key").write_bytes(armored)
        return GrafanaRepo(root=root, fingerprint=key.fingerprint.upper())
