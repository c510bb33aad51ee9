#!/usr/bin/env bash
# Set up this checkout for the main job, on a controller or on the GPU host itself (the
# audit, the deploys): the SSH client, uv and the project's locked virtualenv, nothing more.
# The test machinery (test hosts, browser, promtool) is scripts/bootstrap-tests.sh's.
# Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# openssh-client: pyinfra reaches the hosts over SSH, and validate reads known_hosts with
# ssh-keygen.
apt_packages=(openssh-client)
source scripts/apt_install.sh
apt_install "${apt_packages[@]}"

if ! command -v uv >/dev/null 2>&1; then
    echo "bootstrap: installing uv from PyPI"
    python3 -m pip install --quiet uv 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages uv
fi
export PATH="$HOME/.local/bin:$PATH"

uv sync --locked
