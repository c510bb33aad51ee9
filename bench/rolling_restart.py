"""Requests served and failed through SGLang's router while a profile change restarts the
replicas behind it: rolling (sglang_rolling_batch 1) against all at once (batch = replicas).

Boots REPLICAS test hosts (needs root) converged by deploy/site.py with the tests' stand-ins
(SGLang's stand-in server, made multi-process and draining like the real one; the router
stand-in, retrying as sgl-router does), the router on the first host in front of all of
them. A client sends chat requests through the router one after another for the whole
re-deploy; each mode changes the profile once (mem_fraction_static) and the client's counts
are printed per mode, with the re-deploy's wall time.

    uv run python bench/rolling_restart.py [--replicas 2] [--warmup-s 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scale import converged_site
from tests.hosts.apply import apply

ROUTER_PORT = 30080


class Client:
    """Chat requests through the router, one after another, until stopped."""

    def __init__(self, url: str):
        self.url, self.served, self.failed = url, 0, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "France?"}]})
        while not self.stopped.is_set():
            request = urllib.request.Request(
                self.url, data=body.encode(), headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    json.load(response)
                self.served += 1
            except (OSError, ValueError):
                self.failed += 1
            time.sleep(0.02)


def change_profile(inventory: Path, url: str, fraction: float) -> tuple[int, int, float]:
    """(served, failed, seconds) of the client during one re-deploy that changes the profile."""
    client = Client(url)
    client.thread.start()
    time.sleep(1)
    start = time.monotonic()
    result = apply(
        inventory,
        options=("--data", f'sglang_profile_overrides={{"mem_fraction_static": {fraction}}}'),
    )
    seconds = time.monotonic() - start
    time.sleep(1)
    client.stopped.set()
    client.thread.join(60)
    if result.returncode != 0:
        raise SystemExit(f"the re-deploy failed:\n{result.describe()}")
    return client.served, client.failed, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--warmup-s", type=float, default=3.0, help="the stand-in server's warm-up (default 3)"
    )
    args = parser.parse_args(argv)
    env = {"SGLANG_STANDIN_WARMUP_S": f"{args.warmup_s:g}"}
    with converged_site(args.replicas, sglang_env=env) as site:
        workers = [f"http://{h.address}:30000" for h in site.hosts]
        url = f"http://{site.hosts[0].address}:{ROUTER_PORT}/v1/chat/completions"
        rows = []
        for mode, batch in (("rolling", 1), ("all at once", args.replicas)):
            inventory = site.inventory(
                f"routed-{batch}",
                site.hosts,
                sglang_router_worker_urls=workers,
                sglang_rolling_batch=batch,
            )
            routed = apply(inventory)  # the router, and this mode's batch
            if routed.returncode != 0:
                raise SystemExit(f"deploy/site.py failed:\n{routed.describe()}")
            fraction = 0.8 if batch == 1 else 0.85
            served, failed, seconds = change_profile(inventory, url, fraction)
            rows.append((mode, batch, served, failed, seconds))
        print(f"\n{args.replicas} replicas behind the router, stand-in warm-up {args.warmup_s:g} s")
        header = ("mode", "batch", "served", "failed", "failed %", "re-deploy")
        print(f"{header[0]:<12} " + " ".join(f"{h:>9}" for h in header[1:]))
        for mode, batch, served, failed, seconds in rows:
            share = 100 * failed / max(1, served + failed)
            print(f"{mode:<12} {batch:>9} {served:>9} {failed:>9} {share:>8.1f}% {seconds:>8.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
