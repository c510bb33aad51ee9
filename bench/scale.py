"""Shared by the scale benchmarks: boot test hosts converged by deploy/site.py (the tests'
stand-ins for NVIDIA's repository, PyPI and SGLang, served locally), time one run of a
deploy REPEAT times per host count, print the medians and the ratio of the largest count to
one host."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.hosts import aptrepo, pyindex
from tests.hosts.apply import apply, write_inventory
from tests.hosts.testhosts import TestHostPool, why_unavailable

SIZES = (1, 4)


def timed(run: Callable[[], None], repeat: int) -> list[float]:
    """Wall times of ``repeat`` calls of ``run`` (which raises SystemExit on a bad run)."""
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        run()
        times.append(time.monotonic() - start)
    return times


def print_scale(
    inventories: dict[int, Path], run: Callable[[int, Path], None], repeat: int
) -> None:
    """Time ``run(size, inventory)`` for each host count and print medians and the ratio."""
    medians = {}
    for size, inventory in inventories.items():
        runs = timed(lambda size=size, inventory=inventory: run(size, inventory), repeat)
        medians[size] = statistics.median(runs)
        run_times = ", ".join(f"{t:.2f}" for t in runs)
        print(f"{size} host(s): median {medians[size]:.2f} s  (runs: {run_times})")
    largest = max(medians)
    print(f"ratio {largest} hosts / 1 host: {medians[largest] / medians[1]:.2f}  (goal <= 1.5)")


def main(description: str, run: Callable[[int, Path], None]) -> int:
    """A scale benchmark's command line: ``[--repeat N]``; boots max(SIZES) hosts, converges
    them, writes one inventory per size, times ``run`` on each."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"cannot boot test hosts: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="scale-") as folder:
        workdir = Path(folder)
        mirror = aptrepo.build_repo(workdir / "mirror")
        index = pyindex.build_index(workdir / "index")
        pool = TestHostPool(workdir / "hosts")
        with aptrepo.serve(mirror.root) as mirror_url, aptrepo.serve(index.root) as index_url:
            urls = pyindex.Index(url=index_url, root=index.root)
            data = {
                **pool.inventory_data(),
                "nvidia_apt_mirror": mirror_url,
                "pypi_index_url": urls.pypi_url,
                "torch_index_url": urls.torch_url,
                "python_version": "3.11",  # Debian 12's own: uv downloads no interpreter
                "sglang_model_profile": "dense-bf16",
            }
            try:
                hosts = pool.boot(max(SIZES))
                # Test hosts share this machine's network: each serves SGLang on its own address.
                entries = [(h.address, {**data, "sglang_host": h.address}) for h in hosts]
                inventories = {
                    size: write_inventory(
                        workdir / f"hosts{size}.py", {"gpu_hosts": entries[:size]}
                    )
                    for size in SIZES
                }
                converge = apply(inventories[max(SIZES)])
                if converge.returncode != 0:
                    raise SystemExit(f"deploy/site.py failed:\n{converge.describe()}")
                print_scale(inventories, run, args.repeat)
            finally:
                pool.stop_all()
    return 0
