#!/usr/bin/env bash
# Set up this checkout on a fresh Debian/Ubuntu machine: the apt packages the test hosts
# need, uv, and the project's locked virtualenv. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# iproute2: the private test network (a bridge); openssl: the Secure Boot test's MOK pair;
# chromium: the headless browser that renders the benchmark report (tests/browser/);
# prometheus: its promtool, which CI runs on the monitoring files rendered (.ci/run).
apt_packages=(systemd-container debootstrap openssh-client gnupg iproute2 openssl chromium prometheus)
missing=()
for package in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
        || missing+=("$package")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -eq 0 ]; then
        echo "bootstrap: installing ${missing[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        echo "bootstrap: not root, so not installing ${missing[*]}; tests that need them will skip" >&2
    fi
fi

if ! command -v uv >/dev/null 2>&1; then
    echo "bootstrap: installing uv from PyPI"
    python3 -m pip install --quiet uv 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages uv
fi
export PATH="$HOME/.local/bin:$PATH"

uv sync --locked
