"""Wall time of deploy/audit.py on 1 and on 4 test hosts, and their ratio.

pyinfra audits hosts in parallel (each host's reading, decode prompt and link sampling run
at once), so four hosts should cost little more than one (goal: ratio <= 1.5). Boots real
test hosts (needs root), converges them with deploy/site.py (the tests' stand-ins for
NVIDIA's repository, PyPI and SGLang, replaying the real 2x H200 capture), then times
REPEAT audits of each size and prints medians and their ratio. The audits fail on
driver-drift (the capture runs driver 580, the inventory wants 590): that is expected and
checked, as is that no audit changed anything.

    uv run python bench/audit_scale.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hosts import aptrepo, pyindex  # noqa: E402
from tests.hosts.apply import apply, write_inventory  # noqa: E402
from tests.hosts.testhosts import TestHostPool, why_unavailable  # noqa: E402

SIZES = (1, 4)


def timed_audits(inventory: Path, reports: Path, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        result = apply(inventory, "deploy/audit.py", options=("--data", f"audit_report_dir={reports}"))
        elapsed = time.monotonic() - start
        failed = {
            f["code"]
            for path in reports.glob("*.json")
            for f in json.loads(path.read_text())["findings"]
            if f["level"] == "fail"
        }
        if result.logged_changes() or failed != {"driver-drift"}:
            raise SystemExit(f"unexpected audit (failing: {sorted(failed)}):\n{result.describe()}")
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
    with tempfile.TemporaryDirectory(prefix="audit-scale-") as folder:
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
                "python_version": "3.11",
                "sglang_model_profile": "dense-bf16",
            }
            try:
                return run(pool, data, workdir, args.repeat)
            finally:
                pool.stop_all()


def run(pool: TestHostPool, data: dict, workdir: Path, repeat: int) -> int:
    hosts = pool.boot(max(SIZES))
    # Test hosts share this machine's network: each serves SGLang on its own address.
    entries = [(h.address, {**data, "sglang_host": h.address}) for h in hosts]
    inventories = {
        size: write_inventory(workdir / f"hosts{size}.py", {"gpu_hosts": entries[:size]})
        for size in SIZES
    }
    converge = apply(inventories[max(SIZES)])
    if converge.returncode != 0:
        raise SystemExit(f"deploy/site.py failed:\n{converge.describe()}")
    medians = {}
    for size, inventory in inventories.items():
        runs = timed_audits(inventory, workdir / f"reports{size}", repeat)
        medians[size] = statistics.median(runs)
        print(f"{size} host(s): median {medians[size]:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in runs)})")
    print(f"ratio {max(SIZES)} hosts / 1 host: {medians[max(SIZES)] / medians[1]:.2f}  (goal <= 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
