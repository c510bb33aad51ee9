"""Wall time of a no-change re-apply of deploy/site.py on 1 and on 4 test hosts.

pyinfra runs hosts in parallel, so four hosts should cost little more than one
(goal: ratio <= 1.5). Boots real test hosts (needs root), applies once to converge them,
then times REPEAT no-change runs for each size and prints medians and their ratio.

    uv run python bench/noop_rerun.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hosts import aptrepo  # noqa: E402
from tests.hosts.apply import apply, write_inventory  # noqa: E402
from tests.hosts.testhosts import TestHostPool, why_unavailable  # noqa: E402


def timed_noop_runs(inventory: Path, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        result = apply(inventory)
        elapsed = time.monotonic() - start
        if result.returncode != 0 or result.changed():
            raise SystemExit(f"re-apply was not a clean no-change run:\n{result.describe()}")
        times.append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"cannot boot test hosts: {reason}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="noop-rerun-") as workdir:
        # NVIDIA's repository is replaced by the tests' signed stand-in, served locally.
        built = aptrepo.build_repo(Path(workdir) / "mirror")
        pool = TestHostPool(Path(workdir) / "hosts")
        with aptrepo.serve(built.root) as mirror_url:
            return run(pool, mirror_url, Path(workdir), args.repeat)


def run(pool: TestHostPool, mirror_url: str, workdir: Path, repeat: int) -> int:
    try:
        hosts = pool.boot(4)
        data = {**pool.inventory_data(), "nvidia_apt_mirror": mirror_url}
        inventories = {
            size: write_inventory(
                workdir / f"hosts{size}.py",
                {"gpu_hosts": [(h.address, data) for h in hosts[:size]]},
            )
            for size in (1, 4)
        }
        converge = apply(inventories[4])
        if converge.returncode != 0:
            raise SystemExit(f"first apply failed:\n{converge.describe()}")
        medians = {}
        for size, inventory in inventories.items():
            runs = timed_noop_runs(inventory, repeat)
            medians[size] = statistics.median(runs)
            spread = ", ".join(f"{t:.2f}" for t in runs)
            print(f"{size} host(s): median {medians[size]:.2f} s  (runs: {spread})")
        print(f"ratio 4 hosts / 1 host: {medians[4] / medians[1]:.2f}  (goal <= 1.5)")
    finally:
        pool.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
