"""The results folders of benchmark runs on the controller:
``<results_dir>/<host>/<UTC timestamp>/`` holding bench.jsonl, samples.jsonl, links.json,
profile.json and settings.json (the formats diagnosis/diagnose.py reads), and the lookup of the
run an new one is compared with."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pyinfra_sglang.audit.links import pcie_links
from pyinfra_sglang.audit.report import safe_name
from pyinfra_sglang.gpus import UnknownGpuError
from pyinfra_sglang.redact import redact
from pyinfra_sglang.safe_write import read_file, refuse_link, write_file
from pyinfra_sglang.served_benchmark.folder import BENCH_FILE, SETTINGS_FILE
from pyinfra_sglang.served_benchmark.limits import load_json
from pyinfra_sglang.serving.placement import Placement
from pyinfra_sglang.serving.roofline import roofline_for

TIMESTAMP = "%Y%m%dT%H%M%SZ"


def host_folder(results_dir: str | Path, host_name: str) -> Path:
    """``results_dir/<host>``, the name made safe for a folder."""
    return Path(results_dir) / safe_name(host_name)


def new_run_folder(results_dir: str | Path, host_name: str, now: datetime | None = None) -> Path:
    """A new, empty ``<host>/<YYYYmmddTHHMMSSZ>`` folder (``-2``, ``-3``... when two runs
    start within one second: the names still sort by time)."""
    parent = host_folder(results_dir, host_name)
    # A host folder planted as a link would put the run (and what is fetched into it) in a
    # folder of someone else's; the run folder is the user's alone (0700).
    refuse_link(parent, "the host's results folder")
    parent.mkdir(parents=True, exist_ok=True)
    refuse_link(parent, "the host's results folder")
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime(TIMESTAMP)
    for suffix in ["", *(f"-{n}" for n in range(2, 1000))]:
        folder = parent / f"{stamp}{suffix}"
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: too many runs started at {stamp}")


def write_json(path: Path, value) -> Path:
    """Never through a link or into a FIFO planted at its name (safe_write)."""
    return write_file(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def links_document(gpus: list[dict], virtualization: dict | None) -> dict:
    """links.json: each GPU's PCIe link (the NvidiaGpus fact) and the host's virtualization."""
    return {"gpus": pcie_links(gpus), "virtualization": virtualization}


def profile_document(placement: Placement, gpus: list[dict]) -> dict:
    """profile.json: the decode roofline's numbers, from the profile as the server runs it
    (``placement``: inventory overrides and its [arch.*] table applied, the tensor-parallel
    size) and the GPUs' names; without them when the profile or the GPU spec lacks them
    (diagnosis/diagnose.py then reports no roofline). And the server's CUDA graph settings,
    which the advice for launch-bound load names."""
    profile, tp_size = placement.profile, placement.tp_size
    gpu = gpus[0].get("name") if gpus else None
    document = {
        "model_profile": profile.name,
        "gpu": gpu,
        "tp_size": tp_size,
        "cuda_graph": profile.cuda_graph,
        "cuda_graph_max_bs": profile.cuda_graph_max_bs,
    }
    # The MoE layout served, where one is set: the diagnosis's interconnect estimate
    # (diagnosis/layouts.py).
    for key in ("ep_size", "dp_attention_size", "moe_a2a_backend"):
        if getattr(profile, key) is not None:
            document[key] = getattr(profile, key)
    try:
        document.update(roofline_for(profile, gpu or "", tp_size).as_dict())
    except (ValueError, UnknownGpuError):
        pass
    return document


def scrub_secrets(path: Path, secrets: tuple[str | None, ...] = ()) -> bool:
    """Mask credentials in a fetched file, in place; True when something was masked. Real
    bench_serving (0.5.17) copies the server's /server_info into every result line, and that
    holds the server's ``api_key`` in clear (tests/fixtures/sglang-0.5.17-h200)."""
    text = (read_file(path) or b"").decode(errors="replace")
    masked = redact(text, secrets)
    if masked != text:
        write_file(path, masked)
    return masked != text


def settings_document(settings: dict, digest: str) -> dict:
    return {"settings": settings, "hash": digest}


def latest_run(host_dir: Path, digest: str, since: str = "") -> Path | None:
    """The most recent complete run folder in ``host_dir`` with settings hash ``digest``,
    named ``since`` (a run folder's timestamp) or later."""
    found = previous_run(host_dir, None, digest)
    return found if found is not None and found.name >= since else None


def previous_run(host_dir: Path, current: Path | None, digest: str) -> Path | None:
    """The most recent run folder before ``current`` (any, when None) in ``host_dir`` whose
    settings hash is ``digest`` and which holds a benchmark; None when there is none."""
    if not host_dir.is_dir():
        return None
    earlier = sorted(
        (
            p
            for p in host_dir.iterdir()
            if p.is_dir() and (current is None or p.name < current.name)
        ),
        reverse=True,
    )
    for folder in earlier:
        try:
            found = load_json(folder / SETTINGS_FILE).get("hash")
        except (OSError, ValueError, AttributeError):
            continue  # not a run folder, or one cut short
        if found == digest and (folder / BENCH_FILE).is_file():
            return folder
    return None
