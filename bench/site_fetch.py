"""Fetch once a site against every host fetching: the model role's seconds in a first deploy
of HOSTS fresh test hosts (needs root), the Hub stand-in behind one shared uplink of MB_S
(tests/hosts/hubstandin.py ``uplink_bytes_per_s``: N hosts fetching at once each get 1/N),
with a weights file of GB. Run once with every host fetching from the Hub, once with
`model_fetch_once` (the first host fetches, the others copy from it over the test hosts'
network, each file checked against the Hub's listed size and hash). Prints both and their
ratio, and how many times the weights file left the Hub in each.

    uv run python bench/site_fetch.py [--hosts 4] [--gb 0.5] [--mb-s 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale
from bench.first_deploy_roles import seconds_by_role

ROLE = "Model weights"
WEIGHTS = "/model.safetensors"  # tests/hosts/site_model.py model_files


def first_deploy_model_seconds(
    hosts: int, size: int, rate: int, fetch_once: bool
) -> tuple[float, int]:
    """(the model role's seconds, the weights files' GETs the Hub answered)."""
    stamped: list[tuple[float, str]] = []

    def first_apply(inventory, timeout):
        result, _ = scale.traced_apply(inventory, timeout=timeout, stamped=stamped)
        return result

    with scale.converged_site(
        hosts,
        first_apply=first_apply,
        model_bytes=size,
        uplink_bytes_per_s=rate,
        model_fetch_once=fetch_once,
        # The test hosts share this machine's network namespace, where the seed may not load
        # its nftables table (roles/model_site.py): it serves on the token alone here.
        model_seed_firewall=False,
    ) as site:
        weights = [r for r in site.hub.requests if r[0] == "GET" and r[1].endswith(WEIGHTS)]
    seconds, _, _ = seconds_by_role(stamped)
    return seconds[ROLE], len(weights)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gb", type=float, default=0.5)
    parser.add_argument("--mb-s", type=float, default=50.0)
    args = parser.parse_args()
    size, rate = int(args.gb * 1e9), int(args.mb_s * 1e6)
    every, every_gets = first_deploy_model_seconds(args.hosts, size, rate, fetch_once=False)
    once, once_gets = first_deploy_model_seconds(args.hosts, size, rate, fetch_once=True)
    print(
        f"{args.hosts} hosts, {args.gb:g} GB of weights, one {args.mb_s:g} MB/s uplink "
        f"(the weights alone through it: {size / rate:.1f} s)"
    )
    for label, took, gets in (
        ("every host fetching", every, every_gets),
        ("fetch once", once, once_gets),
    ):
        print(f"  {label:20} {took:7.1f} s of the model role; weights GETs at the Hub: {gets}")
    print(f"  ratio every/once: {every / once:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
