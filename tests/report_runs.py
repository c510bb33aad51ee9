"""Run folders for the report's tests, built from real captures only.

- ``h200_sampler_run``: the GPU sampler on the real 2x H200 VM (tests/fixtures/gpu/
  h200x2-nvlink-vm-sampler: idle, PCIe copies each way, an NVLink copy, a matmul). That run had
  no benchmark, so its steps are load.py's real phases (phases.json: Unix start and end, the
  times steps.jsonl holds), labelled by phase, and its benchmark lines are those of a real
  deploy/bench.py run (below): the format the report reads, measured, but not on that VM.
- ``host_run``: a whole deploy/bench.py run folder from a Debian test host
  (tests/fixtures/report/testhost-run*/, README there): the stand-in SGLang's bench_serving
  really sending requests, the sampler reading the stand-in NVML that replays the H200 capture,
  the bench script's steps.jsonl.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SAMPLER = FIXTURES / "gpu" / "h200x2-nvlink-vm-sampler"
TESTHOST_RUNS = (FIXTURES / "report" / "testhost-run-1", FIXTURES / "report" / "testhost-run-2")


def host_run(parent: Path, number: int = 1, host: str = "127.0.0.2") -> Path:
    """A copy of test-host run ``number`` (1 or 2) at ``parent/<host>/<its timestamp>``."""
    source = TESTHOST_RUNS[number - 1]
    stamp = (source / "TIMESTAMP").read_text().strip()
    folder = parent / host / stamp
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("TIMESTAMP", "README.md"))
    return folder


def h200_sampler_run(parent: Path, host: str = "h200-vm", stamp: str = "20261130T191005Z") -> Path:
    """The real H200 sampler capture as a run folder, its phases as the marked steps."""
    folder = parent / host / stamp
    folder.mkdir(parents=True)
    shutil.copy(SAMPLER / "samples.jsonl", folder / "samples.jsonl")
    phases = json.loads((SAMPLER / "phases.json").read_text())
    folder.joinpath("steps.jsonl").write_text(
        "".join(
            json.dumps({"label": name, "start": start, "end": end}) + "\n"
            for name, (start, end, _) in phases.items()
        )
    )
    shutil.copy(TESTHOST_RUNS[0] / "bench.jsonl", folder / "bench.jsonl")
    # links.json as deploy/bench.py writes it, from what the sampler read of each GPU's link;
    # the VM's virtualization was not recorded in that capture, so none is claimed.
    first = json.loads((SAMPLER / "samples.jsonl").read_text().splitlines()[0])
    links = {
        "gpus": [
            {
                "index": gpu["index"],
                "name": gpu["name"],
                "pcie": {
                    "gen_current": gpu["pcie_gen"],
                    "gen_max": gpu["pcie_gen_max"],
                    "width_current": gpu["pcie_width"],
                    "width_max": gpu["pcie_width_max"],
                },
            }
            for gpu in first["gpus"]
        ],
        "virtualization": None,
    }
    folder.joinpath("links.json").write_text(json.dumps(links))
    return folder
