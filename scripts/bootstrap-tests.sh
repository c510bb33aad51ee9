#!/usr/bin/env bash
# Set up this checkout for the tests: the main job's set-up (scripts/bootstrap.sh), then what
# only the tests need. Never run it on a production GPU server: it installs Prometheus and a
# browser. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

# systemd-container, debootstrap: the Debian test hosts (systemd-nspawn); gnupg: the stand-in
# apt repositories' keys; iproute2: the private test network (a bridge); openssl: the Secure
# Boot test's MOK pair; chromium: the headless browser that renders the benchmark report
# (tests/browser/); prometheus: its promtool, which CI runs on the monitoring files rendered
# (.ci/run). Debian starts the prometheus service it installs: not here (apt_install).
apt_packages=(systemd-container debootstrap gnupg iproute2 openssl chromium prometheus)
source scripts/apt_install.sh
apt_install "${apt_packages[@]}"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] && [ "$(id -u)" -eq 0 ]; then
    # Only promtool is used: no Prometheus listening, unauthenticated, on every address.
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
