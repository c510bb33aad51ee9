"""A signed stand-in for Grafana's apt repository (`deb URL stable main`, the layout of
https://apt.grafana.com): one package named `grafana`, laid out as Grafana's own build lays
out its .deb, and the repository's armored key at /gpg.key.

Sources (read, not copied):
- The package's layout: grafana/grafana, pkg/build/daggerbuild/artifacts/package_deb.go at
  86e4db34ba34db1afcce09a99496f49f74038143 and pkg/build/daggerbuild/fpm/build.go at
  20e5b1d99658df04af3977984c02f28906d7228e (before that, grafana/grafana-build's
  artifacts/package_deb.go and fpm/build.go, 62e82e8117a8e6b23a7db49eae10987664e7e709,
  2025-05-19, say the same): the release tarball under /usr/share/grafana (bin/grafana,
  conf/defaults.ini, conf/sample.ini, conf/ldap.toml, conf/provisioning/*/sample.yaml,
  public/...), the wrappers /usr/sbin/grafana-server and /usr/sbin/grafana-cli, and three
  conffiles: /etc/default/grafana-server, /etc/init.d/grafana-server and
  /usr/lib/systemd/system/grafana-server.service; /etc/grafana ships empty ("set up by the
  postinstall script"); Depends: adduser, musl; Description: Grafana.
- What the postinst does: grafana/grafana packaging/deb/control/postinst as stored at
  03ff8dd4d091b321c27f6a79064ecad6cf4721c3 (which release first carried it is not read
  here): on configure it makes the system group and user grafana (home /usr/share/grafana,
  shell /bin/false), `mkdir -p` and `chown -R grafana:grafana` /var/log/grafana and
  /var/lib/grafana (chmod 755), copies conf/sample.ini to /etc/grafana/grafana.ini (and
  conf/ldap.toml to /etc/grafana/ldap.toml) only when grafana.ini is missing, makes
  /etc/grafana/provisioning/{dashboards,datasources,plugins,access-control,alerting} (each
  with its sample.yaml), then `chown -Rh root:grafana /etc/grafana/*`, /etc/grafana 755,
  its files 640 and folders 755; it starts nothing on a first install.
- The wrapper: grafana/grafana packaging/wrappers/grafana-server at
  1137a659434e2505dbdaa92c641d08041f2a7a93 runs `$GRAFANA_HOME/bin/grafana server "$@"`.
- /etc/default/grafana-server's GRAFANA_USER=grafana and GRAFANA_GROUP=grafana, and the
  unit's EnvironmentFile, User, Group, Type=simple, WorkingDirectory and Restart: grafana/grafana
  packaging/deb/default/grafana-server (aaa918182995a084a99dab9574d7df09665ab94f) and
  packaging/deb/systemd/grafana-server.service (0471472a065a0feb4c77129ecc50e030239060ef).
- VERSION: Grafana 12.3.0, released 2025-11-19 (grafana/grafana CHANGELOG.md, "12.3.0
  (2025-11-19)", compare v12.2.2...v12.3.0, as quoted in
  https://github.com/AndreiGavriliu/homelab/pull/4847; https://github.com/grafana/helm-charts/pull/4012
  "Update Grafana to 12.3.0"). The .deb's name, grafana_<version>_amd64.deb, as
  https://dl.grafana.com/oss/release/ names its files.

What the stand-in leaves out or makes up (no test reads it): Depends (adduser, musl: the test
hosts need nothing more), /etc/init.d/grafana-server and /usr/sbin/grafana-cli, the
provisioning folders' sample.yaml files, the rest of /etc/default/grafana-server (paths the
stand-in's server does not read), the real unit's ExecStart arguments and hardening, and the
files' contents (one comment line each). The user and group are made with
groupadd/useradd where the real postinst uses addgroup/adduser, to the same effect.

Its grafana-server is a test double: a static HTTP server on GF_SERVER_HTTP_ADDR and
GF_SERVER_HTTP_PORT (the role's drop-in sets them), answering /api/health with a file (no
test or role reads it), and recording the environment variable names it was started with
(never values) in /run/grafana-standin/env-names and whether the grafana user can read the
admin password file in /run/grafana-standin/password (that folder, and the tmpfiles.d entry
making it, are the stand-in's own)."""

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
WorkingDirectory=/usr/share/grafana
ExecStart=/usr/share/grafana/bin/grafana server --homepath=/usr/share/grafana
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

# `grafana cli ... admin reset-admin-password --password-from-stdin` (the role's way to apply
# a changed password; grafana/grafana pkg/cmd/grafana-cli/commands/commands.go at db64da7a)
# stores the password's sha256 and who ran it where Grafana keeps its database; `grafana
# server` stores it only when none is there, as Grafana applies admin_password only when it
# creates the admin user (https://gitlab.com/gitlab-org/omnibus-gitlab/-/issues/4230: a
# changed setting does not change the password). Any other `grafana cli` use exits 2.
ADMIN_RECORD = "/var/lib/grafana/standin-admin.sha256"
SERVER = script(
    'if [ "$1" = cli ]; then\n'
    '  case " $* " in *" admin reset-admin-password --password-from-stdin "*) ;;\n'
    '    *) echo "grafana cli (test double): only admin reset-admin-password '
    '--password-from-stdin" >&2; exit 2;; esac\n'
    '  IFS= read -r password || [ -n "$password" ] || exit 1\n'
    f'  printf %s "$password" | sha256sum | cut -d" " -f1 > {ADMIN_RECORD}\n'
    f"  id -un > {ADMIN_RECORD}.by\n"
    "  exit 0\n"
    "fi\n"
    f'if [ ! -e {ADMIN_RECORD} ]; then tr -d "\\n" < '
    '"${GF_PASSWORD_CHECK:-/etc/grafana/pyinfra-sglang-admin-password}" '
    f'| sha256sum | cut -d" " -f1 > {ADMIN_RECORD}; echo server > {ADMIN_RECORD}.by; fi\n'
    "env | cut -d= -f1 | sort > /run/grafana-standin/env-names\n"
    'test -r "${GF_PASSWORD_CHECK:-/etc/grafana/pyinfra-sglang-admin-password}" '
    "&& echo readable > /run/grafana-standin/password || echo unreadable > "
    "/run/grafana-standin/password\n"
    'exec python3 -m http.server --bind "${GF_SERVER_HTTP_ADDR:-0.0.0.0}" '
    '"${GF_SERVER_HTTP_PORT:-3000}" --directory /usr/share/grafana/public\n'
)

POSTINST = script(
    "set -e\n"
    '[ "$1" = configure ] || exit 0\n'
    "getent group grafana >/dev/null || groupadd --system grafana\n"
    "getent passwd grafana >/dev/null || useradd --system -g grafana "
    "-d /usr/share/grafana -s /bin/false grafana\n"
    # The real package ships /etc/grafana, empty; a DebFile is a file, so it is made here.
    "mkdir -p /etc/grafana /var/log/grafana /var/lib/grafana\n"
    "chown -R grafana:grafana /var/log/grafana /var/lib/grafana\n"
    "chmod 755 /var/log/grafana /var/lib/grafana\n"
    "if [ ! -f /etc/grafana/grafana.ini ]; then\n"
    "  cp /usr/share/grafana/conf/sample.ini /etc/grafana/grafana.ini\n"
    "  cp /usr/share/grafana/conf/ldap.toml /etc/grafana/ldap.toml\n"
    "fi\n"
    "for d in dashboards datasources plugins access-control alerting; do\n"
    "  mkdir -p /etc/grafana/provisioning/$d\n"
    "done\n"
    "chown -Rh root:grafana /etc/grafana/*\n"
    "chmod 755 /etc/grafana\n"
    "find /etc/grafana -type f -exec chmod 640 {} ';'\n"
    "find /etc/grafana -type d -exec chmod 755 {} ';'\n"
    # The stand-in's own: the folder its server writes its records to.
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
        DebFile("/usr/share/grafana/conf/defaults.ini", b"; Grafana's defaults (test double)\n"),
        DebFile("/usr/share/grafana/conf/sample.ini", b"; Grafana's configuration (test double)\n"),
        DebFile("/usr/share/grafana/conf/ldap.toml", b"# Grafana's LDAP settings (test double)\n"),
        DebFile("/usr/lib/systemd/system/grafana-server.service", SERVICE),
        DebFile("/etc/default/grafana-server", b"GRAFANA_USER=grafana\n\nGRAFANA_GROUP=grafana\n"),
    )
    return PackageSpec(
        "grafana",
        VERSION,
        "amd64",
        "Grafana",
        files=files,
        conffiles=(
            "/etc/default/grafana-server",
            "/usr/lib/systemd/system/grafana-server.service",
        ),
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
