"""The tuner on a host (deploy/tune.py): pyinfra_sglang.tuning's search, each round served by
the SGLang service role (its health wait and rollback) and measured by the benchmark check.

The search runs when the run executes, inside one operation per host: the rounds it needs
depend on what earlier rounds measured, so they are operations called from it (pyinfra runs an
operation called during execution at once, as a nested operation). A round that fails to start
leaves the previous settings running (the role's rollback) and is recorded as failed; the
search goes on from the last good settings. Every round is in the journal as it finishes
(``<bench_results_dir>/<host>/tune-<search>/tune.jsonl``): the same search run again resumes."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import PyinfraError

from checks.facts import NvidiaGpus, PythonPackages
from checks.host_context import host_position
from checks.served_benchmark import bench_host
from pyinfra_sglang.diagnosis.diagnose import diagnose_results, load_results
from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.report.tuning_page import write_tuning_page
from pyinfra_sglang.run_summary import prefixed
from pyinfra_sglang.safe_write import write_file
from pyinfra_sglang.served_benchmark.folder import BENCH_FILE
from pyinfra_sglang.served_benchmark.results import TIMESTAMP, host_folder, latest_run
from pyinfra_sglang.served_benchmark.settings import bench_settings
from pyinfra_sglang.serving.placement import Placement
from pyinfra_sglang.serving.service_files import host_placement
from pyinfra_sglang.tuning.journal import JournalError, header
from pyinfra_sglang.tuning.judge import Objective
from pyinfra_sglang.tuning.loop import TuneRefused, run_search
from pyinfra_sglang.tuning.search import Measure, Round
from pyinfra_sglang.tuning.space import Space, applicable, load_space
from pyinfra_sglang.tuning.summary import overrides_block, trial_table
from roles.sglang_service import sglang_service


class TuneError(PyinfraError):
    """The search cannot run on this host as asked (the message says why)."""


def objective_of(config: HostConfig) -> Objective:
    return Objective(
        config.tune_concurrency or max(config.bench_concurrencies),
        config.tune_max_tpot_ms,
        config.tune_max_ttft_ms,
    )


def start_settings(profile, space: Space) -> dict[str, Any]:
    """The searched settings as the host serves them now (its profile with its overrides)."""
    return {name: getattr(profile, name) for name in space.names()}


def trial_config(config: HostConfig, settings: dict[str, Any]) -> HostConfig:
    """The host's config serving ``settings``: laid over its own overrides."""
    overrides = {**config.sglang_profile_overrides, **settings}
    return config.model_copy(update={"sglang_profile_overrides": overrides})


def search_folder(results_dir: str, host_name: str, space, start, objective) -> Path:
    """One folder per search (start settings, space, objective): the same search resumes
    there, another gets its own."""
    digest = hashlib.sha256(
        json.dumps(header(space, start, objective), sort_keys=True).encode()
    ).hexdigest()[:12]
    return host_folder(results_dir, host_name) / f"tune-{digest}"


def refuse_unsupported(config: HostConfig, host_name: str) -> None:
    """Before any change: what the search cannot do on this host."""
    if config.sglang_multinode_group:
        raise TuneError(
            f"host {host_name}: sglang_multinode_group {config.sglang_multinode_group!r}: "
            "deploy/tune.py tunes single-node servers (a group's ranks restart together); "
            "allowed: hosts outside a multi-node group"
        )
    if config.bench_repeat < 2:
        raise TuneError(
            f"host {host_name}: bench_repeat = {config.bench_repeat}: one run a trial shows no "
            "spread, so a gain cannot be told from noise; allowed: 2..100 "
            "(e.g. --data bench_repeat=3)"
        )


def _host_space(config: HostConfig, placement: Placement, version: str) -> Space:
    """The settings that apply to this host: its release, its GPUs' architecture and count,
    and the profile as it runs there."""
    return applicable(
        load_space(),
        version,
        placement.gpus.arch or "",  # settings without an architecture list still apply
        only=config.tune_settings,
        profile=placement.profile,
        gpu_count=placement.gpus.count,
    )


def _said(op) -> str:
    """The last line an operation printed, for the journal (its whole output is in the log)."""
    lines = [line for line in op.stderr_lines + op.stdout_lines if line.strip()]
    return f"({lines[-1].strip()[:300]})" if lines else "(see the run's log)"


def _round(config: HostConfig, results_dir: str, version: str, step: Measure) -> Round:
    """Serve the step's settings (health wait, rollback on failure), benchmark them."""
    served = trial_config(config, step.settings)
    label = f"Tune trial {step.trial}" + (f" round {step.round}" if step.round > 1 else "")

    def failed(why: str) -> Round:
        return Round(step.trial, step.round, step.settings, "failed", error=why)

    # A failed round must not fail the host: the search records it and goes on (errors are
    # ignored by pyinfra, and read back from the operation's outcome).
    try:
        served_op = sglang_service(
            name=f"{label}: serve {step.reason}", config=served, _ignore_errors=True
        )
    except PyinfraError as error:  # the render refuses these settings on this host
        return failed(str(error))
    if served_op.did_error():
        return failed(
            "the server did not start healthy; the role restored the previous settings "
            + _said(served_op)
        )
    since = datetime.now(UTC).strftime(TIMESTAMP)
    benchmark = bench_host(
        name=f"{label}: benchmark",
        config=served,
        results_dir=results_dir,
        compare_previous=False,
        _ignore_errors=True,
    )
    if benchmark.did_error():
        return failed("the benchmark failed " + _said(benchmark))
    digest = bench_settings(served, version).digest()
    folder = latest_run(host_folder(results_dir, host.name), digest, since=since)
    if folder is None:
        return failed("the benchmark left no complete run folder")
    try:
        report = diagnose_results(load_results(folder))
        diagnosis = report["steps"]["run_text"]
        if report.get("server"):  # what binds on the server's side (the search's order)
            diagnosis += f"; server: {report['server']['headline']}"
    except ValueError as error:
        diagnosis = f"no diagnosis: {error}"
    return Round(
        step.trial,
        step.round,
        step.settings,
        "ok",
        read_json_lines(folder / BENCH_FILE),
        diagnosis=diagnosis,
    )


def write_summary(folder: Path, objective, start: dict, table: str, block: str) -> Path:
    """tune.txt: the search's table and the overrides line, never written through a link
    planted at its name (pyinfra_sglang/safe_write.py)."""
    return write_file(
        folder / "tune.txt",
        f"objective: {objective.describe()}\nstarting settings: {start}\n\n{table}\n{block}\n",
    )


def _search(config: HostConfig, results_dir: str) -> None:
    version = host.get_fact(PythonPackages, venv=config.venv_path).get("sglang")
    if not version:
        raise TuneError(f"host {host.name}: no SGLang in {config.venv_path}: run deploy/site.py")
    # Where the profile runs here (its [arch.*] table applied): the settings searched start
    # from what the server runs now.
    placement = host_placement(
        config, host.name, host.get_fact(NvidiaGpus), host_position(config, host)
    )
    profile = placement.profile
    space = _host_space(config, placement, version)
    if not space.settings:
        raise TuneError(f"host {host.name}: no tuning setting applies to SGLang {version}")
    start, objective = start_settings(profile, space), objective_of(config)
    folder = search_folder(results_dir, host.name, space, start, objective)
    # One trial's bound: the service's health wait, which is the profile's start timeout.
    bound = profile.start_timeout_s

    def say(line: str) -> None:
        logger.info(host.print_prefix + line)

    try:
        outcome = run_search(
            space,
            start,
            objective,
            folder,
            lambda step: _round(config, results_dir, version, step),
            budget_s=config.tune_budget_s,
            trial_bound_s=bound,
            say=say,
        )
    except TuneRefused as refused:
        raise TuneError(f"host {host.name}: tune_budget_s: {refused}") from None
    except JournalError as error:
        raise TuneError(f"host {host.name}: {error}") from None
    state = outcome.state
    block = overrides_block(config.sglang_profile_overrides, start, state)
    table = trial_table(state.trials)
    write_summary(folder, objective, start, table, block)
    page = write_tuning_page(folder, host.name, state, start, objective, block, outcome.stopped)
    say(prefixed(host.name, f"tuning ({objective.describe()}):\n{table}\n{block}"))
    say(f"tuning page: {page}")
    keep = state.incumbent if config.tune_keep else start
    sglang_service(
        name="Tune: serve the winner" if config.tune_keep else "Tune: serve the starting settings",
        config=trial_config(config, keep),
    )
    if state.stopped:  # the starting settings themselves failed: nothing was judged
        raise TuneError(f"host {host.name}: {state.stopped}")


@operation(is_idempotent=False, _set_in_op=False)
def tune_host(config: HostConfig, results_dir: str):
    """Search this host's serving settings (data/tuning.toml) by serving and benchmarking
    each; leave it on the winner (``tune_keep``) or its starting settings. deploy/tune.py
    calls refuse_unsupported first."""
    # Called operations run at once from here: the operation itself must not count as "in
    # an operation" (as pyinfra's python.call).
    yield FunctionCommand(_search, (config, results_dir), {})
