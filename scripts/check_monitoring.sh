#!/usr/bin/env bash
# CI's lint stage: the monitoring example's Prometheus config and alert rules, rendered as the
# role renders them, checked by Debian's promtool (scripts/bootstrap-tests.sh installs it).
# The example names its secret files relative to where it runs (secrets/, which git ignores):
# they are made in a scratch folder with throwaway values, and the render runs there.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -m 700 "$scratch/secrets"
(
    umask 077
    for name in sglang-api-key grafana-admin-password; do
        head -c 24 /dev/urandom | base64 > "$scratch/secrets/$name"
    done
)
cd "$scratch"
uv run --project "$repo" python -m pyinfra_sglang.inventory.monitoring_files "$repo/inventories/monitoring.py" out
promtool check config out/prometheus.yml
promtool check rules out/sglang-alerts.yml
