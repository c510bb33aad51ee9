"""The benchmark: SGLang's own bench_serving against the host's server, the GPU sampler
alongside, results fetched to the controller, compared with the last run of the same settings,
and diagnosed. Changes nothing on the host but a temporary folder it removes.

``bench_host`` is a pyinfra operation that does its work when the run executes, so pyinfra
benchmarks all hosts in parallel; it yields no command when nothing fails, and a callback that
reports the failures (failing the host, so the run exits non-zero) otherwise.
"""

from __future__ import annotations

import io
import re
import shlex
import time
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.api.exceptions import PyinfraError

from checks.facts import NvidiaGpus, PythonPackages, SystemdUnitState, Virtualization
from checks.failures import fail_host
from checks.host_context import (
    connector_arguments,
    host_position,
    run_on_host,
    transfer_arguments,
)
from pyinfra_sglang.diagnosis.ab_compare import (
    compare,
    comparison_json,
    runs_by_concurrency,
)
from pyinfra_sglang.diagnosis.ab_compare import format_table as format_comparisons
from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results
from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.host_programs import program_path
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.report.page import default_output, read_run, write_ab_report, write_report
from pyinfra_sglang.run_summary import prefixed
from pyinfra_sglang.served_benchmark.bench_serving import run_settings
from pyinfra_sglang.served_benchmark.folder import (
    BENCH_FILE,
    LINKS_FILE,
    LOG_FILE,
    METRICS_FILE,
    PROFILE_FILE,
    SAMPLER_LOG_FILE,
    SAMPLES_FILE,
    SERVER_METRICS_FILE,
    SETTINGS_FILE,
    STEPS_FILE,
)
from pyinfra_sglang.served_benchmark.regression import regressions, throughput_by_concurrency
from pyinfra_sglang.served_benchmark.results import (
    host_folder,
    latest_run,
    links_document,
    new_run_folder,
    previous_run,
    profile_document,
    scrub_secrets,
    settings_document,
    write_json,
)
from pyinfra_sglang.served_benchmark.server_metrics import summarize_polls
from pyinfra_sglang.served_benchmark.settings import (
    DRIVER_PROGRAM,
    KEY_READER_PROGRAM,
    SAMPLER_PROGRAM,
    BenchSettings,
    bench_script,
    bench_settings,
)
from pyinfra_sglang.serving.service_files import UNIT_NAME, host_placement, service_file_path

SCRIPT = "run.sh"
PROGRAMS = (SAMPLER_PROGRAM, KEY_READER_PROGRAM, DRIVER_PROGRAM)
# mktemp replaces the trailing run of Xs with random characters; only a folder of that
# shape is ever used in the commands that follow (rm -rf among them).
TEMP_TEMPLATE = "/tmp/pyinfra-sglang-bench." + "X" * 10
TEMP_FOLDER = re.compile(r"/tmp/pyinfra-sglang-bench\.[A-Za-z0-9]{10}")
# Before anything reads them: bench_serving's lines (and its log) carry the server's API key.
SCRUBBED = (BENCH_FILE, LOG_FILE)
FETCHED = (BENCH_FILE, SAMPLES_FILE, STEPS_FILE, LOG_FILE, SAMPLER_LOG_FILE, METRICS_FILE)


def why_not_ready(service: dict[str, str], sglang_version: str | None, venv: str) -> str | None:
    """Why the host cannot be benchmarked now, or None."""
    if not sglang_version:
        return f"{venv} holds no SGLang: deploy it with `pyinfra INVENTORY deploy/site.py`"
    if service.get("ActiveState") != "active":
        active_state = service.get("ActiveState") or "not installed"
        return f"{UNIT_NAME} is not running ({active_state}): nothing to benchmark"
    return None


def check_lines(lines: list[dict], settings: BenchSettings) -> list[str]:
    """What is wrong with a run's bench_serving lines: one per repeat and concurrency, each
    with every request completed."""
    problems = []
    expected = settings.repeat * len(settings.concurrencies)
    if len(lines) != expected:
        problems.append(f"{BENCH_FILE} holds {len(lines)} results, expected {expected}")
    for line in lines:
        concurrency = line.get("max_concurrency")
        wanted = settings.num_prompts(concurrency) if isinstance(concurrency, int) else None
        if line.get("completed") != wanted:
            problems.append(
                f"concurrency {concurrency}: {line.get('completed')} of {wanted} requests completed"
            )
    return problems


def _run_on_host(config: HostConfig, settings: BenchSettings, run_dir: Path) -> str | None:
    """Ship the programs and the script to a temporary folder on the host, run it, fetch what
    it wrote into ``run_dir``, remove the folder. None when the benchmark passed, else why not."""
    ok, output = host.run_shell_command(f"mktemp -d {TEMP_TEMPLATE}", **connector_arguments(host))
    folder = output.stdout.strip()
    if not ok or not TEMP_FOLDER.fullmatch(folder):
        return f"cannot make a temporary folder on the host: {output.output}"
    try:
        key_file = service_file_path("config") if config.sglang_api_key_file else None
        script = bench_script(config, settings, folder, key_file)
        uploads = [(str(program_path(name)), f"{folder}/{name}") for name in PROGRAMS]
        uploads.append((io.BytesIO(script.encode()), f"{folder}/{SCRIPT}"))
        with transfer_arguments(host) as transfer:
            for local, remote in uploads:
                if not host.put_file(local, remote, **transfer(remote)):
                    return f"cannot upload {remote}"
        calls = settings.repeat * len(settings.concurrencies) + 1  # and the warm-up
        # The script bounds each call itself; this bounds the whole if the host stops answering.
        passed, output = run_on_host(
            host,
            f"bash {shlex.quote(f'{folder}/{SCRIPT}')}",
            _timeout=calls * run_settings().timeout_s + 300,
        )
        _, listing = run_on_host(host, f"ls {shlex.quote(folder)}")
        with transfer_arguments(host) as transfer:
            for name in FETCHED:
                if name in listing.split():
                    remote = f"{folder}/{name}"
                    host.get_file(remote, str(run_dir / name), **transfer(remote))
                    if name in SCRUBBED:
                        scrub_secrets(run_dir / name)
        return None if passed else f"the benchmark failed:\n{output}"
    finally:
        run_on_host(host, f"rm -rf {shlex.quote(folder)}")


def _compare(run_dir: Path, digest: str, lines: list[dict], threshold_pct: float) -> list[str]:
    """Regression messages against the last earlier run of the same settings (logged)."""
    before_dir = previous_run(run_dir.parent, run_dir, digest)
    if before_dir is None:
        logger.info(
            f"{host.print_prefix}no earlier run with these settings ({digest}) to compare with"
        )
        return []
    before = throughput_by_concurrency(read_json_lines(before_dir / BENCH_FILE))
    after = throughput_by_concurrency(lines)
    rows = [
        f"  concurrency {c}: {before[c]:.1f} -> {after[c]:.1f} tok/s"
        for c in sorted(before.keys() & after.keys())
    ]
    logger.info(
        host.print_prefix
        + prefixed(host.name, f"output throughput against {before_dir.name}:\n" + "\n".join(rows))
    )
    return [
        f"{r.message()} (against {before_dir})" for r in regressions(before, after, threshold_pct)
    ]


def diagnosis_text(run_dir: Path) -> str:
    """The diagnosis report (pyinfra_sglang/diagnosis/diagnose.py) of a run folder; without the
    decode roofline when the profile or GPU lacks the numbers for it (the findings stand on their
    own)."""
    results = load_results(run_dir)
    try:
        return format_report(diagnose_results(results))
    except (ValueError, KeyError, PyinfraError) as error:
        return (
            format_report(diagnose_results({**results, "profile": None}))
            + f"(no decode roofline: {error})\n"
        )


def write_report_logged(write) -> None:
    """Run ``write`` (a report writer returning the page's path) and log where the page is;
    a run whose folder cannot be reported on (no samples) is logged, not failed: the benchmark
    itself passed."""
    try:
        logger.info(f"{host.print_prefix}report: {write()}")
    except (ValueError, KeyError, OSError, PyinfraError) as error:
        logger.warning(f"{host.print_prefix}no report: {error}")


def not_the_head(config: HostConfig) -> bool:
    """True (and the operation a no-op) on a multi-node rank > 0: only the group's first host
    serves HTTP, so only it is benchmarked."""
    rank = host_position(config, host).rank
    if rank != 0:
        host.noop(f"node rank {rank} serves no HTTP: the group's first host is benchmarked")
    return rank != 0


@operation()
def bench_host(config: HostConfig, results_dir: str, compare_previous: bool = True):
    """Benchmark this host's SGLang server; write ``results_dir/<host>/<timestamp>/``; fail on
    a failed benchmark or (``compare_previous``) a regression beyond ``bench_regression_pct``."""
    if not state.is_executing:
        host.noop("the benchmark runs when the run executes and changes nothing")
        return
    if not_the_head(config):
        return
    version = host.get_fact(PythonPackages, venv=config.venv_path).get("sglang")
    problem = why_not_ready(
        host.get_fact(SystemdUnitState, unit=UNIT_NAME), version, config.venv_path
    )
    if problem:
        yield fail_host("bench", [problem])
        return
    gpus, virtualization = host.get_fact(NvidiaGpus), host.get_fact(Virtualization)
    settings = bench_settings(config, version)
    run_dir = new_run_folder(results_dir, host.name)
    started = time.monotonic()
    problem = _run_on_host(config, settings, run_dir)
    lines = read_json_lines(run_dir / BENCH_FILE) if (run_dir / BENCH_FILE).is_file() else []
    failures = [problem] if problem else check_lines(lines, settings)
    if failures:
        # No settings.json: a failed run is never what a later run is compared with.
        yield fail_host("bench", [*failures, f"what it left is in {run_dir}"])
        return
    write_json(run_dir / LINKS_FILE, links_document(gpus, virtualization))
    polled = (
        summarize_polls((run_dir / METRICS_FILE).read_text().splitlines(), version)
        if (run_dir / METRICS_FILE).is_file()
        else None
    )
    if polled:
        write_json(run_dir / SERVER_METRICS_FILE, polled)
    # The Placement the service was rendered from: the record holds what the server runs
    # (the profile's [arch.*] table applied), which the diagnosis advises from.
    placement = host_placement(config, host.name, gpus, host_position(config, host))
    write_json(run_dir / PROFILE_FILE, profile_document(placement, gpus))
    write_json(run_dir / SETTINGS_FILE, settings_document(settings.as_dict(), settings.digest()))
    logger.info(
        f"{host.print_prefix}benchmark done in {time.monotonic() - started:.1f} s: {run_dir}"
    )
    failures = (
        _compare(run_dir, settings.digest(), lines, config.bench_regression_pct)
        if compare_previous
        else []
    )
    try:
        text = f"diagnosis of {run_dir}:\n{diagnosis_text(run_dir)}"
        logger.info(host.print_prefix + prefixed(host.name, text))
    except ValueError as error:  # no samples: the sampler could not read the GPUs
        logger.warning(f"{host.print_prefix}no diagnosis: {error}")
    write_report_logged(lambda: write_report(read_run(run_dir), default_output(run_dir, None)))
    if failures:
        yield fail_host("bench", failures)
        return
    host.noop(f"benchmark passed: {run_dir}")


@operation()
def ab_report(config_a: HostConfig, config_b: HostConfig, results_dir: str, since: str):
    """Compare this host's runs of side A and side B made by this A/B (run folders named
    ``since`` or later: deploy/ab.py's start); write ``ab.json`` beside side B's results;
    fail when either side has no complete run."""
    if not state.is_executing:
        host.noop("the comparison reads the runs when the run executes")
        return
    if not_the_head(config_a):
        return
    version = host.get_fact(PythonPackages, venv=config_a.venv_path).get("sglang")
    host_dir = host_folder(results_dir, host.name)
    found = {
        side: latest_run(host_dir, bench_settings(config, version).digest(), since=since)
        for side, config in (("A", config_a), ("B", config_b))
    }
    missing = [side for side, folder in found.items() if folder is None]
    if missing:
        yield fail_host("bench", [f"no complete run of side {', '.join(missing)} in {host_dir}"])
        return
    comparisons = compare(runs_by_concurrency([found["A"]]), runs_by_concurrency([found["B"]]))
    write_json(
        found["B"] / "ab.json",
        {
            "a": str(found["A"]),
            "b": str(found["B"]),
            "b_overrides": config_b.bench_ab_overrides,
            # Non-finite numbers (side A at 0 tok/s) as null: ab.json stays JSON.
            "comparisons": [comparison_json(c) for c in comparisons],
        },
    )
    write_report_logged(
        lambda: write_ab_report(
            read_run(found["A"]), read_run(found["B"]), default_output(found["A"], found["B"])
        )
    )
    text = (
        f"A/B, B = {config_b.bench_ab_overrides} (A: {found['A'].name}, "
        f"B: {found['B'].name}):\n{format_comparisons(comparisons)}"
    )
    logger.info(host.print_prefix + prefixed(host.name, text))
    host.noop("; ".join(f"concurrency {c.concurrency}: {c.verdict}" for c in comparisons))
