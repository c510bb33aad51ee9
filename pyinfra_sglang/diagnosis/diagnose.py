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
``steps.jsonl`` (optional: the diagnosis per step)
    One line per benchmark call, as host_programs/bench_driver.py writes it:
    ``{"repeat": 1, "concurrency": 8, "start": <Unix s>, "end": <Unix s>}`` (a warm-up
    ``{"label": "warm-up", "warmup": true, ...}``). With it (and samples that carry the
    sampler's ``time``), each concurrency is judged on the samples where its load ran
    (diagnosis/steps.py), not on the whole sampled span, most of which is start-up and idle.
``profile.json`` (optional: the decode roofline, the server's settings)
    ``{"profile": "glm-5-nvfp4", "gpu": "NVIDIA H200", "tp_size": 8}`` (optional
    ``"profile_dirs": [...]`` for your own profiles, and the MoE layout served:
    ``ep_size``, ``dp_attention_size``, ``moe_a2a_backend``; with a profile named, the
    interconnect estimate of diagnosis/layouts.py), or the numbers themselves:
    ``{"active_params_b": 40, "bytes_per_param": 0.5625, "memory_bandwidth_gbs": 4800,
    "tp_size": 8}``. A profile is named as in data/profiles: letters, digits, ``.``, ``_``,
    ``-``, nothing else (no path).

Each file is checked for the types it must hold (numbers where numbers are read, a JSON object
where one is); a file that fails is named with what is wrong in it. Each is read within the
caps of data/diagnosis.toml ``[limits]`` (bytes, JSON nesting, samples, GPUs, readings, steps,
benchmark lines, the size of a number: served_benchmark/limits.py); a file past one is
refused, naming the cap. Samples without any GPU reading are refused too: there is nothing
to diagnose.

The rules are in diagnosis/bottlenecks.py. The report lists each GPU's summary, the findings with
their evidence and what to try next, and the roofline with each benchmark row's single-stream
decode rate (1000 / median TPOT) as a share of it. Exit status 0 when a report was made, 2 when
the folder cannot be read.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.diagnosis.bottlenecks import diagnose, format_gbs, link_capacity, thresholds
from pyinfra_sglang.diagnosis.samples import (
    gpu_indexes,
    read_json_lines,
    samples_from_capture,
    summarize_gpu,
)
from pyinfra_sglang.diagnosis.server_side import scaling_text, server_report
from pyinfra_sglang.diagnosis.steps import (
    diagnose_steps,
    is_number,
    is_reading,
    rows_by_step,
    run_text,
    sample_offset,
    steps_on_sample_axis,
)
from pyinfra_sglang.served_benchmark.folder import (
    BENCH_FILE,
    LINKS_FILE,
    METRICS_FILE,
    PROFILE_FILE,
    SAMPLES_FILE,
    SAMPLES_FILE_BEFORE,
    SERVER_METRICS_FILE,
    SETTINGS_FILE,
    STEPS_FILE,
)
from pyinfra_sglang.served_benchmark.limits import (
    WHERE,
    OverCapError,
    check_count,
    limits,
    read_capped,
)
from pyinfra_sglang.served_benchmark.limits import loads as capped_loads
from pyinfra_sglang.served_benchmark.server_metrics import summarize_polls
from pyinfra_sglang.serving.roofline import DecodeRoofline, roofline_for, stream_rate
from pyinfra_sglang.terminal import brief

__all__ = ["diagnose", "diagnose_results", "format_report", "load_results", "stream_rate"]

PROFILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
# What the rules read, per file: these must be numbers (or null) where present.
SAMPLE_GPU_NUMBERS = (
    "gpu_util",
    "mem_util",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "sm_clock_mhz",
    "power_w",
    "sm_clock_max_mhz",
    "power_limit_w",
    "pcie_gen_max",
    "pcie_width",
)
SAMPLE_CPU_NUMBERS = ("percent", "max_process_percent")
LINK_GPU_NUMBERS = ("power_limit_w", "sm_clock_max_mhz", "nvlink_gbs")
PCIE_NUMBERS = ("gen_current", "gen_max", "width_current", "width_max")
BENCH_NUMBERS = (
    "completed",
    "output_throughput",
    "max_concurrency",
    "median_tpot_ms",
    # Shown by the report (its table and TPOT chart).
    "median_ttft_ms",
    "p99_ttft_ms",
    "p99_tpot_ms",
)
SERVER_NUMBERS = ("kv_cache_usage", "queued_requests")
ROOFLINE_NUMBERS = ("memory_bandwidth_gbs", "active_params_b", "bytes_per_param")
CAPTURE_VALUES = 6  # gpu_util, mem_util, pcie_tx_kbps, pcie_rx_kbps, sm_clock_mhz, power_mw


class ResultsError(ValueError):
    """A results folder that cannot be read."""


def is_plain_profile_name(name: object) -> bool:
    """A profile name as data/profiles has them: letters, digits, ``.``, ``_``, ``-`` (not
    first: no hidden file, no ``..``), so never a path."""
    return isinstance(name, str) and PROFILE_NAME.fullmatch(name) is not None


# --- reading, with the types each file must hold ---------------------------------------------


def _object(where: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise ResultsError(f"{where} is {brief(value)}, not a JSON object")
    return value


def _list(where: str, value: object) -> list:
    if not isinstance(value, list):
        raise ResultsError(f"{where} is {brief(value)}, not a list")
    return value


def _numbers(where: str, mapping: dict, keys: tuple[str, ...], null: bool = True) -> None:
    """Each of ``keys`` present in ``mapping`` is a reading: a number from 0 to max_number."""
    for key in keys:
        if key not in mapping or (null and mapping[key] is None):
            continue
        if not is_reading(mapping[key]):
            raise ResultsError(
                f"{where}: {key} is {brief(mapping[key])}, not a number from 0 to "
                f"{limits().max_number:g}"
            )


def _index(where: str, value: object) -> None:
    top = limits().max_gpus - 1
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top):
        raise ResultsError(
            f"{where}: index is {brief(value)}, not a GPU index (0 to {top}; max_gpus in {WHERE})"
        )


def _text_of(path: Path) -> str:
    try:
        return read_capped(path)
    except OverCapError as error:
        raise ResultsError(str(error)) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise ResultsError(f"{path}: cannot be read: {reason}") from None


def _loads(path: Path, text: str):
    try:
        return capped_loads(path, text)
    except OverCapError as error:
        raise ResultsError(str(error)) from None
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not valid JSON: {error}") from None


def _json(path: Path):
    return _loads(path, _text_of(path))


def _optional_json(path: Path):
    return _json(path) if path.is_file() else None


def _json_lines(path: Path, cap: str) -> list:
    """The lines of ``path``, at most the ``cap`` of data/diagnosis.toml [limits]."""
    try:
        return read_json_lines(path, cap)
    except OverCapError as error:
        raise ResultsError(str(error)) from None
    except (OSError, ValueError) as error:
        raise ResultsError(f"{path}: {error}") from None


def _cap(where: object, count: int, what: str, key: str) -> None:
    try:
        check_count(where, count, what, key)
    except OverCapError as error:
        raise ResultsError(str(error)) from None


def _check_gpu_count(where: str, count: int, readings: int) -> int:
    """``readings`` plus this sample's ``count`` GPUs, both within their caps."""
    _cap(where, count, "GPUs in one sample", "max_gpus")
    _cap(where, readings + count, "GPU readings so far", "max_readings")
    return readings + count


def _checked_samples(path: Path) -> list[dict]:
    """The samples in ``path`` (either format; see diagnosis/samples.py), in the sampler's
    shape, each checked for the types the rules read."""
    text = _text_of(path)
    readings = 0
    if text.lstrip().startswith("["):
        rows = _list(str(path), _loads(path, text))
        _cap(path, len(rows), "rows", "max_samples")
        for number, row in enumerate(rows, 1):
            where = f"{path}: row {number}"
            _object(where, row)
            if not is_number(row.get("t")):
                raise ResultsError(f"{where}: t is {brief(row.get('t'))}, not a number")
            gpus = [key for key in row if key.isdigit()]
            readings = _check_gpu_count(where, len(gpus), readings)
            for key in gpus:
                # Short ASCII digits only: int() of a 5000-digit key raises, of "²" too.
                _index(where, int(key) if key.isascii() and len(key) < 10 else key)
                values = row[key]
                if not (
                    isinstance(values, list)
                    and len(values) >= CAPTURE_VALUES
                    and all(is_reading(v) for v in values[:CAPTURE_VALUES])
                ):
                    raise ResultsError(
                        f"{where}: GPU {key} is {brief(values)}, not a list of "
                        f"{CAPTURE_VALUES} numbers from 0 to {limits().max_number:g}"
                    )
        samples = samples_from_capture(rows)
    else:
        samples = _json_lines(path, "max_samples")
    readings = 0
    for number, sample in enumerate(samples, 1):
        where = f"{path}: sample {number}"
        _object(where, sample)
        if not is_number(sample.get("t")):
            raise ResultsError(f"{where}: t is {brief(sample.get('t'))}, not a number")
        gpus = _list(f"{where}: gpus", sample.get("gpus"))
        readings = _check_gpu_count(where, len(gpus), readings)
        seen: set[int] = set()
        for position, gpu in enumerate(gpus):
            at = f"{where}: gpus[{position}]"
            _object(at, gpu)
            _index(at, gpu.get("index"))
            # A GPU listed twice would count its readings twice (6 samples read as 12).
            if gpu["index"] in seen:
                raise ResultsError(f"{at}: GPU {gpu['index']} is listed twice in one sample")
            seen.add(gpu["index"])
            _numbers(at, gpu, SAMPLE_GPU_NUMBERS)
            if gpu.get("name") is not None and not isinstance(gpu["name"], str):
                raise ResultsError(f"{at}: name is {brief(gpu['name'])}, not text")
            if gpu.get("nvlink_raw") is not None:
                raw = _object(f"{at}: nvlink_raw", gpu["nvlink_raw"])
                _numbers(f"{at}: nvlink_raw", raw, tuple(raw))
        if sample.get("cpu"):
            cpu = _object(f"{where}: cpu", sample["cpu"])
            _numbers(f"{where}: cpu", cpu, ("processes",), null=False)
            _numbers(f"{where}: cpu", cpu, SAMPLE_CPU_NUMBERS)
    if not readings:
        # An empty file (the sampler found no GPU, or was stopped at once) is no run to judge:
        # refused rather than reported with no finding, which would read as "all well".
        held = f"{len(samples)} sample(s), none with a GPU reading" if samples else "no sample"
        raise ResultsError(f"{path}: no GPU samples ({held}): nothing to diagnose")
    return samples


def _checked_links(path: Path) -> dict:
    links = _optional_json(path)
    if links is None:
        return {}
    _object(str(path), links)
    for position, gpu in enumerate(_list(f"{path}: gpus", links.get("gpus", []))):
        where = f"{path}: gpus[{position}]"
        _object(where, gpu)
        _index(where, gpu.get("index"))
        _numbers(where, gpu, LINK_GPU_NUMBERS)
        if gpu.get("pcie") is not None:
            _numbers(f"{where}: pcie", _object(f"{where}: pcie", gpu["pcie"]), PCIE_NUMBERS)
    virtualization = links.get("virtualization")
    if virtualization is not None:
        _object(f"{path}: virtualization", virtualization)
        for key in ("vm", "container"):
            value = virtualization.get(key)
            if value is not None and not isinstance(value, str):
                raise ResultsError(f"{path}: virtualization: {key} is {brief(value)}, not text")
    return links


def _checked_bench(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = _json_lines(path, "max_bench_rows")
    top = limits().max_concurrency
    for number, row in enumerate(rows, 1):
        where = f"{path}: line {number}"
        _numbers(where, _object(where, row), BENCH_NUMBERS)
        concurrency = row.get("max_concurrency")
        if concurrency is not None and not (
            isinstance(concurrency, int)
            and not isinstance(concurrency, bool)
            and 1 <= concurrency <= top
        ):
            raise ResultsError(
                f"{where}: max_concurrency is {brief(concurrency)}, not a whole number from "
                f"1 to {top} (max_concurrency in {WHERE})"
            )
    return rows


def _checked_server(path: Path) -> dict | None:
    server = _optional_json(path)
    if server is not None:
        _numbers(str(path), _object(str(path), server), SERVER_NUMBERS)
    return server


def _checked_steps(path: Path, samples: list[dict]) -> list:
    if not path.is_file():
        return []
    lines = _json_lines(path, "max_steps")
    try:
        return steps_on_sample_axis(lines, samples)
    except ValueError as error:
        raise ResultsError(f"{path}: {error}") from None


def served_settings(profile: dict | None) -> dict | None:
    """The server's settings profile.json records (cuda_graph, cuda_graph_max_bs), checked."""
    if not profile:
        return None
    served = {}
    if isinstance(profile.get("cuda_graph"), bool):
        served["cuda_graph"] = profile["cuda_graph"]
    max_bs = profile.get("cuda_graph_max_bs")
    if isinstance(max_bs, int) and not isinstance(max_bs, bool) and max_bs > 0:
        served["cuda_graph_max_bs"] = max_bs
    return served or None


def _server_results(folder: Path, notes: list[str]) -> dict | None:
    """server_metrics.json, or, in a run folder as the benchmark leaves it on the host (its
    raw poll file and no summary: deploy/bench.py writes the summary on the controller),
    the same summary made here from metrics.txt, said in ``notes``."""
    summary, polls = folder / SERVER_METRICS_FILE, folder / METRICS_FILE
    if summary.is_file() or not polls.is_file():
        return _checked_server(summary)
    try:
        text = read_capped(polls)
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{polls}: cannot be read: {error}") from None
    version = _settings_version(folder)
    warnings: list[str] = []
    try:
        server = summarize_polls(text.splitlines(), version, warnings)
    except ValueError as error:  # a release data/sglang_bench.toml has no series for
        raise ResultsError(f"{polls}: {error}") from None
    if server is None:
        notes.append(f"{polls.name}: no poll answered with the server's queue and KV usage")
        return None
    dropped = f"; {len(warnings)} value(s) or poll(s) dropped" if warnings else ""
    notes.append(
        f"the server side read from {polls.name} ({server['polls']} polls{dropped}): "
        f"no {SERVER_METRICS_FILE}, which deploy/bench.py writes from it"
    )
    return server


def _settings_version(folder: Path) -> str | None:
    """The SGLang release settings.json records (the poll file's series depend on it)."""
    settings = _optional_json(folder / SETTINGS_FILE)
    inner = settings.get("settings") if isinstance(settings, dict) else None
    version = inner.get("sglang_version") if isinstance(inner, dict) else None
    return (
        version if isinstance(version, str) and re.fullmatch(r"\d+(\.\d+){1,3}", version) else None
    )


def _sampled_gpu(samples: list[dict]) -> str | None:
    """The GPU name the sampler recorded first (all GPUs of a host are one model)."""
    for sample in samples[:1]:
        for gpu in sample.get("gpus") or []:
            name = gpu.get("name") if isinstance(gpu, dict) else None
            if isinstance(name, str) and name.strip() and name.isprintable() and len(name) < 100:
                return name.strip()
    return None


def load_results(folder: str | Path) -> dict:
    """Everything a results folder holds, parsed and checked: samples, gpu_facts,
    virtualization, bench, server, profile, steps (each None or empty where its file is
    absent), and notes: what was read in place of a file that was not there.
    ResultsError naming the file and what is wrong in it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}")
    found = [folder / n for n in (SAMPLES_FILE, SAMPLES_FILE_BEFORE) if (folder / n).is_file()]
    if not found:
        raise ResultsError(f"{folder}: no samples.jsonl (the GPU sampler's output)")
    samples = _checked_samples(found[0])
    links = _checked_links(folder / LINKS_FILE)
    profile = _optional_json(folder / PROFILE_FILE)
    notes: list[str] = []
    if profile is not None:
        _object(str(folder / PROFILE_FILE), profile)
        gpu = _sampled_gpu(samples)
        if not profile.get("gpu") and gpu:
            # Older runs: the GPU table's rates (the prefill floor's dense rate) by its name.
            profile = {**profile, "gpu": gpu}
            notes.append(
                f"profile.json names no GPU: {gpu}, as samples.jsonl names it, stands for it "
                "(its rates from data/gpus.toml)"
            )
    return {
        "samples": samples,
        "gpu_facts": {g["index"]: g for g in links.get("gpus", [])},
        "virtualization": links.get("virtualization"),
        "bench": _checked_bench(folder / BENCH_FILE),
        "server": _server_results(folder, notes),
        "profile": profile,
        "steps": _checked_steps(folder / STEPS_FILE, samples),
        "notes": notes,
    }


def _tp_size(value: object) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ResultsError(f"profile.json: tp_size is {brief(value)}, not a GPU count (1 or more)")
    return value


def roofline_from(spec: dict) -> DecodeRoofline:
    """The roofline a profile.json describes: by profile and GPU name, or by its numbers.
    ResultsError for a spec that lacks them or holds the wrong types, or names a profile with
    anything but a plain name (a path would read any .toml file)."""
    _object(PROFILE_FILE, spec)
    by_name = "profile" in spec
    needed = (
        ("gpu", "tp_size")
        if by_name
        else ("tp_size", "memory_bandwidth_gbs", "active_params_b", "bytes_per_param")
    )
    missing = [key for key in needed if key not in spec]
    if missing:
        raise ResultsError(f"profile.json lacks {', '.join(missing)}")
    tp_size = _tp_size(spec["tp_size"])
    if by_name:
        from pyinfra_sglang.serving.profiles import load_profile

        name, gpu, dirs = spec["profile"], spec["gpu"], spec.get("profile_dirs", [])
        if not is_plain_profile_name(name):
            raise ResultsError(
                f"profile.json: profile is {brief(name)}, not a profile name (letters, digits, "
                "'.', '_', '-'; no path)"
            )
        if not isinstance(gpu, str):
            raise ResultsError(f"profile.json: gpu is {brief(gpu)}, not a GPU name")
        if not (isinstance(dirs, list) and all(isinstance(d, str) for d in dirs)):
            raise ResultsError(
                f"profile.json: profile_dirs is {brief(dirs)}, not a list of folders"
            )
        return roofline_for(load_profile(name, dirs), gpu, tp_size)
    for key in ROOFLINE_NUMBERS:
        if not (is_number(spec[key]) and spec[key] > 0):
            raise ResultsError(f"profile.json: {key} is {brief(spec[key])}, not a number above 0")
    roof = DecodeRoofline(
        tp_size=tp_size,
        memory_bandwidth_gbs=float(spec["memory_bandwidth_gbs"]),
        active_params_b=float(spec["active_params_b"]),
        bytes_per_param=float(spec["bytes_per_param"]),
    )
    if not 0 < roof.tokens_per_s < math.inf or not math.isfinite(roof.gb_per_token):
        raise ResultsError("profile.json: its numbers are too large to give a roofline")
    return roof


LAYOUT_KEYS = ("ep_size", "dp_attention_size", "moe_a2a_backend")


def _layout_finding(results: dict) -> Finding | None:
    """What the served layout moved over the links by the estimate, and which layout would
    move less (diagnosis/layouts.py): for a profile.json that names its profile (with the
    layout it served: ep_size, dp_attention_size, moe_a2a_backend, where set)."""
    spec = results["profile"]
    if not spec or not ("profile" in spec or "model_profile" in spec):
        return None
    from pyinfra_sglang.diagnosis.layouts import layout_finding
    from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name
    from pyinfra_sglang.serving.profiles import ProfileError, load_profile, merge_overrides

    if "profile" in spec:
        # roofline_from checked the name, the GPU and the folders.
        profile = load_profile(spec["profile"], spec.get("profile_dirs", []))
    else:
        # deploy/bench.py's profile.json (served_benchmark/results.py) names the profile it
        # served; one of the user's own folders is not known here: no estimate then.
        name = spec["model_profile"]
        if not (is_plain_profile_name(name) and isinstance(spec.get("gpu"), str)):
            return None
        try:
            profile = load_profile(name)
        except ProfileError:
            return None
    served = {key: spec[key] for key in LAYOUT_KEYS if spec.get(key) is not None}
    try:
        profile = merge_overrides(profile, served)
    except ProfileError as error:
        raise ResultsError(f"profile.json: {error}") from None
    try:
        gpu = gpu_by_name(spec["gpu"])
    except UnknownGpuError:
        gpu = None
    return layout_finding(
        profile,
        _tp_size(spec["tp_size"]),
        gpu,
        results["bench"],
        results["gpu_facts"],
        thresholds().link.saturated_fraction,
    )


def _per_concurrency_findings(by_step: dict, server: dict | None) -> list[Finding]:
    """Each concurrency's findings, named by it, then the server's memory-capacity finding
    (judged on the whole run where the server's numbers have no timeline to cut steps from;
    with one, the server's verdicts per step replace it)."""
    findings = [
        replace(f, message=f"{v.label}: {f.message}")
        for v in by_step["concurrencies"]
        for f in v.findings
        if f.code != "memory-capacity-bound"
    ]
    if _server_timeline(server):
        return findings
    return findings + [f for f in diagnose([], server=server) if f.code == "memory-capacity-bound"]


def _server_timeline(server: dict | None) -> bool:
    """Is there a server timeline to judge? A malformed one (not a list of readings) counts:
    server_report then says it could not be read, instead of this crashing on it."""
    timeline = (server or {}).get("timeline")
    if not isinstance(timeline, list):
        return timeline is not None
    return any(not isinstance(r, dict) or isinstance(r.get("t"), (int, float)) for r in timeline)


def _server_side(results: dict, steps: list, by_step: dict) -> tuple[dict | None, list]:
    """The server's verdicts per step and the scaling table, where its /metrics were polled
    with times (diagnosis/server_side.py)."""
    if not _server_timeline(results["server"]):
        return None, []
    offset = sample_offset(results["samples"])
    if offset is None:
        return None, []
    gpu_verdicts = {v.concurrency: v.verdict for v in by_step["concurrencies"] if v.concurrency}
    return server_report(
        results["server"],
        steps,
        rows_by_step(steps, results["bench"]),
        results["bench"],
        results["profile"],
        gpu_verdicts,
        offset,
    )


def diagnose_results(results: dict) -> dict:
    """Findings, per-GPU summaries, the roofline and (with steps) the verdicts per step and
    per concurrency of loaded results, as plain data. With steps the findings are those of
    each concurrency's load window; without, of the whole sampled span."""
    roof = roofline_from(results["profile"]) if results["profile"] else None
    served = served_settings(results["profile"])
    steps = [s for s in results.get("steps") or [] if not s.warmup]
    by_step = server_side = None
    if steps:
        context = {
            "gpu_facts": results["gpu_facts"],
            "virtualization": results["virtualization"],
            "roofline": roof,
            "served": served,
        }
        by_step = diagnose_steps(results["samples"], results["steps"], results["bench"], context)
        findings = _per_concurrency_findings(by_step, results["server"])
        server_side, server_findings = _server_side(results, steps, by_step)
        findings += server_findings
    else:
        findings = diagnose(
            results["samples"],
            results["gpu_facts"],
            results["virtualization"],
            results["bench"],
            results["server"],
            roof,
            served,
        )
    layout = _layout_finding(results)
    if layout is not None:
        findings = [*findings, layout]
    busy_util = thresholds().busy.gpu_util_pct
    summaries = []
    for index in gpu_indexes(results["samples"]):
        summary = summarize_gpu(results["samples"], index, busy_util)
        pcie = results["gpu_facts"].get(index, {}).get("pcie")
        capacity, name = link_capacity(summary, pcie)
        # The per-sample series are left out before asdict, which would copy each value.
        series = [
            f"{n}_series" for n in ("pcie_busier", "pcie_both", "nvlink_busier", "nvlink_both")
        ]
        row = asdict(replace(summary, **dict.fromkeys(series, ())))
        for key in series:
            del row[key]
        summaries.append({**row, "pcie_link": name, "pcie_capacity_gbs": capacity})
    report = {
        "findings": findings,
        "gpus": summaries,
        "roofline": None,
        "steps": None,
        "notes": list(results.get("notes") or []),
    }
    if by_step is not None and server_side is not None:
        report["server"] = server_side
    if by_step is not None:
        report["steps"] = {
            "run": by_step["run"],
            "run_text": run_text(by_step),
            "concurrencies": [v.as_dict() for v in by_step["concurrencies"]],
            "steps": [v.as_dict() for v in by_step["steps"]],
        }
    if roof is not None:
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


def _repeats(steps: list[dict]) -> dict:
    found: dict = {}
    for step in steps:
        found.setdefault(step["concurrency"], []).append(step)
    return found


def _step_text(step: dict) -> str:
    roofline = step.get("roofline_share")
    share = f", {roofline:.0%} of the decode roofline" if roofline is not None else ""
    return (
        f"{step['verdict']} (load {step['load_s']:.1f} of {step['span_s']:.1f} s, GPU busy in "
        f"{step['busy_share']:.0%} of the step's samples{share})"
    )


def format_report(report: dict) -> str:
    """The report as text: what was read in place of a missing file, per-GPU summary,
    findings with evidence, the roofline."""
    lines = [f"Read: {note}" for note in report.get("notes") or []]
    lines += ["GPU samples (median/p90):"]
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
    if report.get("steps"):
        lines += ["", "Verdict per benchmark step (judged where its load ran):"]
        for step in report["steps"]["steps"]:
            lines.append(f"  {step['label']}: {_step_text(step)}")
        if any(len(v) > 1 for v in _repeats(report["steps"]["steps"]).values()):
            lines.append("  per concurrency, repeats together:")
            lines += [
                f"    {v['label']}: {_step_text(v)}" for v in report["steps"]["concurrencies"]
            ]
        lines.append(f"  run: {report['steps']['run_text']}")
    if report.get("server"):
        lines += ["", *scaling_text(report["server"])]
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
