"""Time and peak memory of `pyinfra-sglang analyze --query-csv` on a large CSV.

The CSV is the real 2x H200 `--query-gpu` capture (tests/fixtures/gpu/h200x2-nvlink-vm/smi.txt)
cut to a few columns and its two GPU rows repeated, as `nvidia-smi --query-gpu=... -l 1`
prints them (one header, then a row per GPU per second): 2,000,000 rows, about 20 MB.
Each run is a fresh process; its peak RSS comes from the kernel (wait4's ru_maxrss), and a
2-row file gives the interpreter's own start for comparison.

    uv run python bench/analyze_csv_scale.py [--rows 2000000] [--repeat 3] [--checkout DIR]

`--checkout DIR` measures another tree's code (e.g. `git archive main | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests" / "fixtures" / "gpu" / "h200x2-nvlink-vm" / "smi.txt"
FIELDS = ("index", "pcie.link.gen.current", "pcie.link.width.current")


def capture_rows() -> tuple[list[str], list[list[str]]]:
    """The real --query-gpu block's header and GPU rows, split into cells."""
    lines = CAPTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("index, name,"))
    header = [cell.strip() for cell in lines[start].split(",")]
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("###"):
            break
        rows.append([cell.strip() for cell in line.split(",")])
    return header, rows


def write_csv(path: Path, rows: int) -> None:
    header, gpus = capture_rows()
    keep = [header.index(field) for field in FIELDS]
    lines = [", ".join(gpu[i] for i in keep) + "\n" for gpu in gpus]
    with path.open("w") as out:
        out.write(", ".join(header[i] for i in keep) + "\n")
        block = "".join(lines) * 1000
        for _ in range(rows // (len(lines) * 1000)):
            out.write(block)


def run_once(checkout: Path, csv: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of one analyze run."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = "import sys; from pyinfra_sglang.cli.main import main; sys.exit(main(sys.argv[1:]))"
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "analyze", "--query-csv", str(csv), "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="tree whose code runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        small, large = Path(folder, "small.csv"), Path(folder, "large.csv")
        write_csv(small, 2000)
        small.write_text("".join(small.read_text().splitlines(keepends=True)[:3]))
        write_csv(large, args.rows)
        print(f"code: {args.checkout}")
        print(f"CSV: {args.rows:,} rows, {large.stat().st_size / 1e6:.1f} MB ({', '.join(FIELDS)})")
        for label, csv in (("2 rows", small), (f"{args.rows:,} rows", large)):
            runs = [run_once(args.checkout, csv) for _ in range(args.repeat)]
            times = ", ".join(f"{t:.2f}" for t, _, _ in runs)
            print(
                f"{label:>16}: median {statistics.median(t for t, _, _ in runs):.2f} s "
                f"({times}), peak RSS {max(m for _, m, _ in runs):.0f} MiB, "
                f"exit {sorted({rc for _, _, rc in runs})}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
