"""Render the monitoring host's Prometheus files for an inventory, for promtool in CI:

uv run python -m pyinfra_sglang.inventory.monitoring_files inventories/monitoring.py OUT
promtool check config OUT/prometheus.yml && promtool check rules OUT/sglang-alerts.yml
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyinfra_sglang import data
from pyinfra_sglang.inventory.loading import host_config, load_inventory_file
from pyinfra_sglang.inventory.monitoring import inventory_plan
from pyinfra_sglang.monitoring import render


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    inventory = load_inventory_file(argv[0])
    plan = inventory_plan(inventory, {h.name: host_config(h) for h in inventory})
    if plan is None:
        print(f'{argv[0]}: no host has monitoring_role = "server"', file=sys.stderr)
        return 1
    listen = str(host_config(inventory.get_host(plan.server)).monitoring_listen_address)
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    settings = data.monitoring().prometheus
    (out / Path(settings.config).name).write_text(render.prometheus_config(plan, listen))
    (out / Path(settings.rules).name).write_text(render.alert_rules_file(plan))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
