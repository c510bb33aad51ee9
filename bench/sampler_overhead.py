"""Does the GPU sampler slow the load it watches? The multi-GPU LLM-shaped phases
(tests/fixtures/gpu/h200x2-tp-dp-sampler/multi_gpu_phases.py, one process per GPU) run three
times on a GPU machine: without the sampler, with it at 0.1 s reading NVLink every second (the
default), and with it reading NVLink at every sample (as before); it prints each phase's rate
per run and its ratio to the run without the sampler, and the sampler's own CPU share.

    python3 bench/sampler_overhead.py [--seconds 5]      (on the GPU machine; needs torch)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = ROOT / "tests" / "fixtures" / "gpu" / "h200x2-tp-dp-sampler" / "multi_gpu_phases.py"
SAMPLER = ROOT / "pyinfra_sglang" / "host_programs" / "gpu_sampler.py"
RATE = {  # the rate each phase reports in phases.json
    "tp_decode": "tokens_per_s",
    "tp_prefill": "tokens_per_s",
    "dp_decode": "tokens_per_s_all",
    "nvlink_swap": "gbs_each_way",
    "allreduce": "busbw_gbs",
}
RUNS = (
    ("no sampler", None),
    ("sampler, NVLink every 1 s", 1.0),
    ("sampler, NVLink every sample", 0.1),
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(folder: Path, seconds: float, nvlink_interval: float | None) -> tuple[dict, float | None]:
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")
    sampler = None
    if nvlink_interval is not None:
        sampler = subprocess.Popen(
            [
                sys.executable,
                str(SAMPLER),
                "--duration",
                "600",
                "--interval",
                "0.1",
                "--nvlink-interval",
                str(nvlink_interval),
                "--output",
                str(folder / "samples.jsonl"),
            ],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2)
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(gpus),
            str(LOAD),
            "--out",
            str(folder / "phases.json"),
            "--seconds",
            str(seconds),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    share = None
    if sampler is not None:
        share = cpu_seconds(sampler.pid) / (time.monotonic() - start + 2)
        sampler.send_signal(signal.SIGTERM)
        sampler.wait()
    return json.loads((folder / "phases.json").read_text())["phases"], share


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per phase")
    args = parser.parse_args()
    results = []
    for name, interval in RUNS:
        with tempfile.TemporaryDirectory() as folder:
            phases, share = run(Path(folder), args.seconds, interval)
        results.append((name, phases, share))
        print(f"ran: {name}", flush=True)
    base = results[0][1]
    print(f"\n{'phase':<12} {'rate':<16} " + " ".join(f"{name:>30}" for name, _, _ in results))
    for phase, key in RATE.items():
        cells = []
        for _, phases, _ in results:
            value, ratio = phases[phase][key], phases[phase][key] / base[phase][key]
            cells.append(f"{value:>20.1f} ({ratio:>5.2f})")
        print(f"{phase:<12} {key:<16} " + " ".join(f"{c:>30}" for c in cells))
    shares = " ".join(f"{'-' if s is None else f'{s:.0%} of a core':>30}" for _, _, s in results)
    print(f"{'sampler CPU':<29} {shares}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
