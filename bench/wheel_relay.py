"""What flash_attn_build_once costs a copying host: the seed's wheel through the controller
(roles/flash_attn_site.py), timed on test hosts (needs root). A file of MB megabytes stands
in for the wheel on the first host; the controller fetches it once over SSH (SFTP, pyinfra's
get_file, as relay does), hashes it, and uploads it to each other host (put_file, as
installed_from_seed does), where sha256sum checks it. Prints seconds and MB/s of each step;
installing the wheel itself is pip's, and not timed here.

    uv run python bench/wheel_relay.py [--hosts 3] [--mb 100]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all

from tests.hosts.testhosts import TestHostPool, why_unavailable

WHEEL = "/var/lib/pyinfra-sglang/wheels/flash-attn-bench/flash_attn-bench.whl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3, help="the seed and the copying hosts")
    parser.add_argument("--mb", type=int, default=100, help="the wheel's size")
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"test hosts unavailable: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="wheel-relay-"))
    pool = TestHostPool(work)
    try:
        booted = pool.boot(args.hosts)
        seed_host, others = booted[0], booted[1:]
        folder = WHEEL.rsplit("/", 1)[0]
        pool.run(seed_host, f"mkdir -p {folder} && head -c {args.mb}M /dev/urandom > {WHEEL}")
        inventory = Inventory(([(h.address, pool.inventory_data()) for h in booted], {}))
        state = State(inventory=inventory, config=Config())
        connect_all(state)
        seed = inventory.get_host(seed_host.address)
        local = work / "wheel.whl"

        started = time.monotonic()
        assert seed.get_file(WHEEL, str(local))
        fetched = time.monotonic() - started
        digest = hashlib.sha256(local.read_bytes()).hexdigest()
        print(f"{args.mb} MB wheel, {len(others)} copying hosts")
        print(f"  seed -> controller (get_file):  {fetched:6.2f} s  {args.mb / fetched:7.0f} MB/s")
        for other in others:
            host = inventory.get_host(other.address)
            pool.run(other, f"mkdir -p {folder}")
            started = time.monotonic()
            assert host.put_file(str(local), WHEEL)
            uploaded = time.monotonic() - started
            started = time.monotonic()
            checked = pool.run(other, f"sha256sum {WHEEL}").stdout.split()[0]
            hashed = time.monotonic() - started
            assert checked == digest, (checked, digest)
            print(
                f"  controller -> {other.address} (put_file): {uploaded:6.2f} s "
                f"{args.mb / uploaded:7.0f} MB/s; sha256 there {hashed:.2f} s"
            )
    finally:
        pool.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
