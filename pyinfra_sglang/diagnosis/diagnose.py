"""``pyinfra-sglang diagnose RESULTS_DIR [--json]``: name what limits a served model, offline.

RESULTS_DIR holds:

``samples.jsonl`` (required)
    host_programs/gpu_sampler.py output. Without it, a ``samples.json`` in the shared capture
    format (tests/fixtures/gpu/*/samples.json) is read instead.
``links.json`` (optional)
    ``{"gpus": [{"index": 0, "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16,
    "width_max": 16}, "power_limit_w": 700, "sm_clock_max_mhz": 1980}],
    "virtualization": {"container": null, "vm": "kvm"}}``; optional per GPU ``"nvlink_gbs"``
    (NVLink capacity per direction). Per GPU, what this file lacks is taken from what the
    sampler recorded and the GPU spec table (data/gpus.toml); virtualization as
    checks.facts.Virtualization reads it.
``bench.jsonl`` (optional)
    SGLang ``bench_serving --output-file`` lines; read: ``completed``, ``output_throughput``,
    ``max_concurrency``, ``median_tpot_ms``.
``server_metrics.json`` (optional)
    ``{"kv_cache_usage": 0.97, "queued_requests": 12}``: SGLang's /metrics
    ``sglang:token_usage`` and ``sglang:num_queue_reqs`` during the run.
``profile.json`` (optional: the decode roofline)
    ``{"profile": "glm-5-nvfp4", "gpu": "NVIDIA H200", "tp_size": 8}`` (optional
    ``"profile_dirs": [...]`` for your own profiles), or the numbers themselves:
    ``{"active_params_b": 40, "bytes_per_param": 0.5625, "memory_bandwidth_gbs": 4800,
    "tp_size": 8}``.

The rules are in diagnosis/bottlenecks.py. The report lists each GPU's summary, the findings with
their evidence and what to try next, and the roofline with each benchmark row's single-stream
decode rate (1000 / median TPOT) as a share of it. Exit status 0 when a report was made, 2 when
the folder cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.diagnosis.bottlenecks import diagnose, format_gbs, link_capacity, thresholds
from pyinfra_sglang.diagnosis.roofline import DecodeRoofline, roofline_for
from pyinfra_sglang.diagnosis.samples import (
    gpu_indexes,
    load_samples,
    read_json_lines,
    summarize_gpu,
)

__all__ = ["diagnose", "diagnose_results", "format_report", "load_results"]


class ResultsError(ValueError):
    """A results folder that cannot be read."""


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not valid JSON: {error}") from None


def _optional_json(path: Path):
    return _json(path) if path.is_file() else None


def load_results(folder: str | Path) -> dict:
    """Everything a results folder holds, parsed: samples, gpu_facts, virtualization, bench,
    server, profile (each None or empty where its file is absent)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{folder}: no such folder")
    found = [folder / n for n in ("samples.jsonl", "samples.json") if (folder / n).is_file()]
    if not found:
        raise ResultsError(f"{folder}: no samples.jsonl (the GPU sampler's output)")
    try:
        samples = load_samples(found[0])
    except (ValueError, KeyError) as error:
        raise ResultsError(f"{found[0]}: {error}") from None
    links = _optional_json(folder / "links.json") or {}
    bench_file = folder / "bench.jsonl"
    return {
        "samples": samples,
        "gpu_facts": {int(g["index"]): g for g in links.get("gpus", [])},
        "virtualization": links.get("virtualization"),
        "bench": read_json_lines(bench_file) if bench_file.is_file() else [],
        "server": _optional_json(folder / "server_metrics.json"),
        "profile": _optional_json(folder / "profile.json"),
    }


def roofline_from(spec: dict) -> DecodeRoofline:
    """The roofline a profile.json describes: by profile and GPU name, or by its numbers."""
    by_name = "profile" in spec
    needed = (
        ("gpu", "tp_size")
        if by_name
        else ("tp_size", "memory_bandwidth_gbs", "active_params_b", "bytes_per_param")
    )
    missing = [key for key in needed if key not in spec]
    if missing:
        raise ResultsError(f"profile.json lacks {', '.join(missing)}")
    if by_name:
        from pyinfra_sglang.profiles import load_profile

        profile = load_profile(spec["profile"], spec.get("profile_dirs", []))
        return roofline_for(profile, spec["gpu"], int(spec["tp_size"]))
    return DecodeRoofline(
        tp_size=int(spec["tp_size"]),
        memory_bandwidth_gbs=float(spec["memory_bandwidth_gbs"]),
        active_params_b=float(spec["active_params_b"]),
        bytes_per_param=float(spec["bytes_per_param"]),
    )


def stream_rate(row: dict) -> float | None:
    """One stream's decode tokens/s in a bench_serving row: 1000 / median TPOT (at concurrency
    1 also the output throughput)."""
    tpot = row.get("median_tpot_ms")
    if tpot and tpot > 0:
        return 1000 / tpot
    if row.get("max_concurrency") == 1:
        return row.get("output_throughput")
    return None


def diagnose_results(results: dict) -> dict:
    """Findings, per-GPU summaries and the roofline of loaded results, as plain data."""
    findings = diagnose(
        results["samples"],
        results["gpu_facts"],
        results["virtualization"],
        results["bench"],
        results["server"],
    )
    busy_util = thresholds()["busy"]["gpu_util_pct"]
    summaries = []
    for index in gpu_indexes(results["samples"]):
        summary = summarize_gpu(results["samples"], index, busy_util)
        pcie = results["gpu_facts"].get(index, {}).get("pcie")
        capacity, name = link_capacity(summary, pcie)
        row = asdict(summary)
        del row["pcie_busier_series"], row["nvlink_busier_series"]
        summaries.append({**row, "pcie_link": name, "pcie_capacity_gbs": capacity})
    report = {"findings": findings, "gpus": summaries, "roofline": None}
    if results["profile"]:
        roof = roofline_from(results["profile"])
        runs = []
        for row in results["bench"]:
            rate = stream_rate(row)
            runs.append(
                {
                    "max_concurrency": row.get("max_concurrency"),
                    "output_throughput": row.get("output_throughput"),
                    "stream_tokens_per_s": rate,
                    "fraction_of_bound": roof.fraction(rate) if rate else None,
                }
            )
        report["roofline"] = {**roof.as_dict(), "runs": runs}
    return report


def _spread(value: dict | None, unit: str = "") -> str:
    if value is None or value["median"] is None:
        return "n/a"
    if unit == "GB/s":
        return f"{format_gbs(value['median'])}/{format_gbs(value['p90'])}"
    return f"{value['median']:.0f}/{value['p90']:.0f}{unit}"


def format_report(report: dict) -> str:
    """The report as text: per-GPU summary, findings with evidence, the roofline."""
    lines = ["GPU samples (median/p90):"]
    for g in report["gpus"]:
        nvlink = ""
        if g["nvlink_busier_gbs"]:
            nvlink = f", NVLink {_spread(g['nvlink_busier_gbs'], 'GB/s')}"
        lines.append(
            f"  GPU {g['index']}: {g['samples']} samples, busy {g['busy_share']:.0%}, "
            f"util {_spread(g['gpu_util'], '%')}, mem util {_spread(g['mem_util'], '%')}, "
            f"PCIe TX {_spread(g['pcie_tx_gbs'], 'GB/s')} "
            f"RX {_spread(g['pcie_rx_gbs'], 'GB/s')} ({g['pcie_link']}){nvlink}, "
            f"SM {_spread(g['sm_clock_mhz'], ' MHz')}, power {_spread(g['power_w'], ' W')}"
        )
    lines += ["", "Findings:"]
    lines += [f"  [{f.level}] {f.code}: {f.message}" for f in report["findings"]]
    roof = report["roofline"]
    if roof:
        lines += [
            "",
            f"Decode roofline (batch 1): {roof['bound_tokens_per_s']:.0f} tok/s = "
            f"{roof['tp_size']} GPUs x {roof['memory_bandwidth_gbs']:g} GB/s / "
            f"({roof['active_params_b']:g}B parameters x {roof['bytes_per_param']:g} bytes = "
            f"{roof['gb_per_token']:g} GB per token)",
        ]
        for run in roof["runs"]:
            if run["stream_tokens_per_s"]:
                lines.append(
                    f"  concurrency {run['max_concurrency']}: "
                    f"{run['stream_tokens_per_s']:.1f} tok/s per stream = "
                    f"{run['fraction_of_bound']:.1%} of the bound "
                    f"({run['output_throughput'] or 0:.0f} output tok/s in all)"
                )
    return "\n".join(lines) + "\n"


def _as_json(report: dict) -> str:
    findings = [f.as_dict() if isinstance(f, Finding) else f for f in report["findings"]]
    return json.dumps({**report, "findings": findings}, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        report = diagnose_results(load_results(args.results_dir))
    except (ResultsError, ValueError, KeyError, PyinfraError) as error:
        print(f"diagnose: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(_as_json(report) if args.json else format_report(report))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="folder with samples.jsonl")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
