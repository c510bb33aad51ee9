"""The tuner's core loop against a real SGLang on the H200 machine (issue 27's proof).

``prepare`` runs here: the search of bench/real_engine_profiles/tune-space.toml over the
real-8b profile; every combination of its settings rendered with the project's own
``pyinfra-sglang render`` and one bench script from ``bench_script()``, into ``.sglkit/tune/``
(ignored, carried). ``device`` runs on the GPU machine with the kit's Python (standard library
only): ``pyinfra_sglang.tuning.loop.run_search`` itself, each round serving the rendered unit as
bench/real_engine.py does (its ExecStart, env file and config), waiting for /health, running
the benchmark and stopping the server; the journal goes to ``$OUT/tune.jsonl`` after every round
and the round folders to ``$OUT/rounds.tgz``, so a call cut off by its time limit still returns
them. Copy the journal back (``resume``) and call again: the search resumes where it stopped.
``summary`` runs here: the table of every trial with the diagnosis of each round's folder, the
winner as an overrides block.

    python bench/real_engine_tune.py prepare
    (GPU machine) bash .sglkit/bin/setup.sh && python3 bench/real_engine_tune.py device \
        --budget-s 450
    python bench/real_engine_tune.py resume /work/.device/N      (journal back into .sglkit/tune)
    python bench/real_engine_tune.py summary /work/.device/N [/work/.device/M ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.real_engine import (  # noqa: E402  (after the path: run as a script)
    BENCH_HOME,
    PROFILES,
    SGLANG_VERSION,
    VENV,
    Server,
    wait_ready,
)
from pyinfra_sglang.tuning.judge import Objective  # noqa: E402
from pyinfra_sglang.tuning.loop import TuneRefused, run_search  # noqa: E402
from pyinfra_sglang.tuning.search import Measure, Round  # noqa: E402
from pyinfra_sglang.tuning.space import load_space  # noqa: E402

TUNE = ROOT / ".sglkit" / "tune"
SPACE_FILE = PROFILES / "tune-space.toml"
PROFILE = "real-8b"
CURRENT = f"{BENCH_HOME}/tune-current"  # the bench script's folder, moved away after a round


def search_table() -> dict:
    return tomllib.loads(SPACE_FILE.read_text())


def start_settings(table: dict) -> dict:
    return {name: table["start"].get(name) for name in table["search"]["order"]}


def settings_key(settings: dict) -> str:
    return "_".join(f"{k}-{settings[k]}" for k in sorted(settings)).replace(".", "p")


# --- prepare (here) ---------------------------------------------------------------------------


def prepare(args: argparse.Namespace) -> int:
    from bench.real_engine import h200_placement, render_with_overrides
    from pyinfra_sglang.host_programs import program_path
    from pyinfra_sglang.inventory import HostConfig
    from pyinfra_sglang.served_benchmark.results import profile_document
    from pyinfra_sglang.served_benchmark.settings import bench_script, bench_settings
    from pyinfra_sglang.serving.profiles import load_profile

    table = search_table()
    space = load_space(table)
    start = start_settings(table)
    if TUNE.exists():
        shutil.rmtree(TUNE)
    (TUNE / "renders").mkdir(parents=True)
    for name in ("gpu_sampler.py", "api_key.py", "bench_driver.py"):
        shutil.copy(program_path(name), TUNE / name)
    choices = [sorted({*s.values, start[s.name]}, key=repr) for s in space.settings]
    for combination in itertools.product(*choices):
        settings = dict(zip(space.names(), combination, strict=True))
        overrides = {k: v for k, v in settings.items() if v is not None}
        rendered = render_with_overrides(PROFILE, overrides, TUNE / "profile")
        if rendered is None:
            print(f"render failed for {settings}", file=sys.stderr)
            return 1
        (TUNE / "renders" / f"{settings_key(settings)}.render").write_text(rendered)
    shutil.rmtree(TUNE / "profile")
    b = table["bench"]
    config = HostConfig(
        sglang_model_profile=PROFILE,
        sglang_profile_dirs=[str(PROFILES)],
        sglang_version=SGLANG_VERSION,
        venv_path=VENV,
        sglang_api_key_file="/x/sglang-api-key",
        bench_concurrencies=b["concurrencies"],
        bench_input_len=b["input_len"],
        bench_output_len=b["output_len"],
        bench_repeat=b["repeat"],
        bench_prompts_per_concurrency=b["prompts_per_concurrency"],
    )
    settings = bench_settings(config, SGLANG_VERSION)
    (TUNE / "bench.sh").write_text(
        bench_script(config, settings, CURRENT, "/etc/sglang/sglang.yaml")
    )
    profile = load_profile(PROFILE, [str(PROFILES)])
    document = profile_document(h200_placement(profile), [{"name": "NVIDIA H200"}])
    (TUNE / "profile.json").write_text(json.dumps(document, indent=2))
    (TUNE / "journal").mkdir()
    count = len(list((TUNE / "renders").iterdir()))
    print(f"prepared {count} rendered combinations and the bench script in {TUNE}")
    return 0


# --- device (the GPU machine, standard library only) -------------------------------------------


def device(args: argparse.Namespace) -> int:
    table = search_table()
    space, start = load_space(table), start_settings(table)
    objective = Objective(int(table["objective"]["concurrency"]))
    limits = table["device"]
    out = Path(os.environ.get("OUT", "/tmp/tuneout"))
    rounds_dir = Path(BENCH_HOME) / "tune-rounds"
    rounds_dir.mkdir(parents=True, exist_ok=True)
    journal = TUNE / "journal"
    logs = Path(BENCH_HOME) / "tune-logs"  # $OUT brings back 8 files at most: into the tar
    logs.mkdir(parents=True, exist_ok=True)

    def run_round(step: Measure) -> Round:
        name = f"t{step.trial}-r{step.round}"
        render = (TUNE / "renders" / f"{settings_key(step.settings)}.render").read_text()
        server = Server(render, logs, name)
        server.start()
        try:
            if not wait_ready(server, limits["start_timeout_s"]):
                tail = server.log_path.read_text(errors="replace").splitlines()[-3:]
                return Round(
                    step.trial,
                    step.round,
                    step.settings,
                    "failed",
                    error=f"not healthy within {limits['start_timeout_s']} s: " + " | ".join(tail),
                )
            current = Path(CURRENT)
            if current.exists():
                shutil.rmtree(current)
            current.mkdir(parents=True)
            for program in ("gpu_sampler.py", "api_key.py", "bench_driver.py"):
                shutil.copy(TUNE / program, current / program)
            done = subprocess.run(
                ["bash", str(TUNE / "bench.sh")],
                capture_output=True,
                text=True,
                timeout=limits["bench_bound_s"] + 60,
            )
            (current / "script-output.txt").write_text(done.stdout + done.stderr)
            shutil.copy(TUNE / "profile.json", current / "profile.json")
            target = rounds_dir / name
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(current), target)
            bench = target / "bench.jsonl"
            lines = (
                [json.loads(x) for x in bench.read_text().splitlines()] if bench.exists() else []
            )
            if done.returncode != 0 or not lines:
                return Round(
                    step.trial,
                    step.round,
                    step.settings,
                    "failed",
                    error=f"benchmark rc {done.returncode}: {done.stderr[-300:]}",
                )
            return Round(step.trial, step.round, step.settings, "ok", lines)
        finally:
            server.stop(60)

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    def keep() -> None:
        """The journal and the round folders to $OUT: a call cut off by its limit returns them."""
        shutil.copy(journal / "tune.jsonl", out / "tune.jsonl")
        with tarfile.open(out / "rounds.tgz", "w:gz") as tar:
            tar.add(rounds_dir, arcname="tune-rounds")
            tar.add(logs, arcname="tune-logs")

    def each_round(step: Measure) -> Round:
        keep()  # the rounds so far (the loop appends each after it returns)
        result = run_round(step)
        error = f" ({result.error})" if result.error else ""
        say(f"trial {step.trial} round {step.round}: {result.status}{error}")
        return result

    try:
        outcome = run_search(
            space,
            start,
            objective,
            journal,
            each_round,
            args.budget_s,
            limits["start_timeout_s"] + limits["bench_bound_s"],
            say=say,
        )
    except TuneRefused as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 2
    keep()
    say(f"stopped: {outcome.stopped}" if outcome.stopped else "search finished")
    return 0


# --- resume and summary (here) ----------------------------------------------------------------


def resume(args: argparse.Namespace) -> int:
    """Put a call's returned journal back where the next call reads it."""
    source = Path(args.folder) / "tune.jsonl"
    shutil.copy(source, TUNE / "journal" / "tune.jsonl")
    rounds = len(source.read_text().splitlines()) - 1
    print(f"{rounds} rounds back in {TUNE / 'journal'}: the next device call resumes after them")
    return 0


def summary(args: argparse.Namespace) -> int:
    """The search as the journal of the last folder holds it: every trial, each round's
    diagnosis from its folder, the winner."""
    import tempfile
    from dataclasses import replace

    from pyinfra_sglang.diagnosis.diagnose import diagnose_results, load_results
    from pyinfra_sglang.tuning.journal import open_journal
    from pyinfra_sglang.tuning.search import replay
    from pyinfra_sglang.tuning.summary import overrides_block, trial_table

    table = search_table()
    space, start = load_space(table), start_settings(table)
    objective = Objective(int(table["objective"]["concurrency"]))
    unpacked = Path(tempfile.mkdtemp(prefix="tune-rounds-"))
    for folder in args.folders:  # later calls' folders replace earlier ones of the same round
        with tarfile.open(Path(folder) / "rounds.tgz") as tar:
            tar.extractall(unpacked, filter="data")
    journal_dir = Path(tempfile.mkdtemp(prefix="tune-journal-"))
    shutil.copy(Path(args.folders[-1]) / "tune.jsonl", journal_dir / "tune.jsonl")
    rounds = open_journal(journal_dir, space, start, objective)
    verdicts = {}
    for r in rounds:
        folder = unpacked / "tune-rounds" / f"t{r.trial}-r{r.round}"
        if r.status == "ok" and (folder / "samples.jsonl").is_file():
            report = diagnose_results(load_results(folder))
            verdicts.setdefault(r.trial, []).append(report["steps"]["run_text"])
    rounds = [replace(r, diagnosis="; ".join(verdicts.get(r.trial, [])) or None) for r in rounds]
    state = replay(space, start, objective, rounds)
    print(f"objective: {objective.describe()}; starting settings {start}")
    print(trial_table(state.trials))
    if state.next is not None:
        print(f"not finished: next would be trial {state.next.trial} ({state.next.reason})")
    print(overrides_block({}, start, state))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="render every combination into .sglkit/tune (here)")
    run = sub.add_parser("device", help="run the search (on the GPU machine)")
    run.add_argument("--budget-s", type=float, required=True, help="seconds for this call")
    back = sub.add_parser("resume", help="a returned journal back into .sglkit/tune (here)")
    back.add_argument("folder")
    report = sub.add_parser("summary", help="the search's table from returned folders (here)")
    report.add_argument("folders", nargs="+")
    args = parser.parse_args(argv)
    return {"prepare": prepare, "device": device, "resume": resume, "summary": summary}[
        args.command
    ](args)


if __name__ == "__main__":
    sys.exit(main())
