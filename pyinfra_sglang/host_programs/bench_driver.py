#!/usr/bin/env python3
"""Every call of one benchmark run in one process: SGLang's serving benchmark imported once.

Shipped to a GPU host and run with the SGLang venv's Python; the standard library only (the
benchmark module is the venv's own SGLang). ``python -m sglang.bench_serving`` starts by
importing SGLang, loading the tokenizer and making prompts: on a real H200 that took ~25-30 s
of every ~35 s call while the GPU was busy ~5 s of it. Here the module is imported once, its
own parser reads the arguments once (the module runs as ``__main__`` up to its
``parse_args()``, which this stops), the tokenizer is loaded once, and then each step calls the
module's ``run_benchmark(args)`` with its concurrency and prompt count:

    python bench_driver.py --module sglang.bench_serving --log bench.log \\
        --steps steps.jsonl --timeout 3600 --warmup 32,32 \\
        --step 1,1,8 --step 1,32,128 -- --backend sglang-oai-chat --output-file bench.jsonl ...

``--step REPEAT,CONCURRENCY,PROMPTS`` in order; ``--warmup CONCURRENCY,PROMPTS`` first (its
result goes to ``warmup.jsonl``, not to ``--output-file``): the first measured step then meets
a server whose kernels and caches are warm. Each step appends ``{"repeat", "concurrency",
"start", "end"}`` (Unix seconds) to ``--steps`` (the warm-up ``{"label": "warm-up",
"warmup": true, ...}``). The benchmark's own output goes to ``--log``; this program prints one
line per step; where the module's requests start in a ``benchmark`` coroutine (SGLang's
do), the line's ``load_start`` says when. A failing step (the benchmark exits, raises, or runs
past ``--timeout`` seconds) stops the run: the step is named, the log's last 25 lines go to
stderr, and the exit status is the benchmark's (124 for the timeout).

Python 3.9+ and the standard library only, like every host program.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib
import inspect
import json
import os
import runpy
import signal
import sys
import time
import traceback

WARMUP_FILE = "warmup.jsonl"
LOG_TAIL_LINES = 25
TIMED_OUT = 124


class _Parsed(Exception):
    """Raised from inside the benchmark's parse_args: the namespace is read, stop there."""


class _TimedOut(Exception):
    pass


def parsed_arguments(module: str, argv: list) -> argparse.Namespace:
    """``argv`` read by ``module``'s own parser: the module runs as ``__main__`` (as
    ``python -m`` runs it) and stops at its first ``parse_args``, so every release's flags,
    defaults and checks are its own."""
    original = argparse.ArgumentParser.parse_args
    found = []

    def capture(self, args=None, namespace=None):
        found.append(original(self, args, namespace))
        raise _Parsed

    saved_argv = sys.argv
    argparse.ArgumentParser.parse_args = capture
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Parsed:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv = saved_argv
    if not found:
        raise RuntimeError(f"{module} ran without parsing its arguments")
    return found[0]


# What run_benchmark loads from disk by model path every call: once per process is enough. On
# the real H200 each call spent ~3 s in them (AutoTokenizer twice) before its first request.
CACHED_LOADERS = ("get_tokenizer", "check_chat_template")


def benchmark_function(module: str, marks: dict):
    """``module``'s ``run_benchmark``, its tokenizer loaders wrapped to load once per process,
    and its ``benchmark`` coroutine (where the requests start, after the prompts are made)
    wrapped to note the time it starts in ``marks["load_start"]``."""
    run = importlib.import_module(module).run_benchmark
    names = getattr(run, "__globals__", {})
    for name in CACHED_LOADERS:
        if callable(names.get(name)):
            names[name] = functools.lru_cache(maxsize=None)(names[name])
    benchmark = names.get("benchmark")
    if inspect.iscoroutinefunction(benchmark):

        async def timed(*args, **kwargs):
            marks["load_start"] = time.time()
            return await benchmark(*args, **kwargs)

        names["benchmark"] = timed
    return run


def _pair(text: str, size: int) -> tuple:
    parts = text.split(",")
    if len(parts) != size or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {size} whole numbers above 0")
    return tuple(int(p) for p in parts)


def _on_alarm(signum, frame):
    raise _TimedOut


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-LOG_TAIL_LINES:])
    except OSError:
        return ""


def _call(run, args: argparse.Namespace, timeout_s: int) -> int:
    """One benchmark call: 0, or its exit status."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout_s)
    try:
        run(args)
        return 0
    except SystemExit as stop:
        if stop.code is None or stop.code == 0:
            return 0
        return stop.code if isinstance(stop.code, int) else 1
    except _TimedOut:
        print(f"timed out after {timeout_s} s", file=sys.stderr)
        return TIMED_OUT
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        signal.alarm(0)
        sys.stdout.flush()
        sys.stderr.flush()


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", required=True, help="the release's benchmark module")
    parser.add_argument("--log", required=True, help="file the benchmark's own output goes to")
    parser.add_argument("--steps", required=True, help="JSON lines file of each step's span")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds one step may take")
    parser.add_argument("--warmup", type=lambda t: _pair(t, 2), help="CONCURRENCY,PROMPTS")
    parser.add_argument(
        "--step",
        type=lambda t: _pair(t, 3),
        action="append",
        required=True,
        help="REPEAT,CONCURRENCY,PROMPTS (in order)",
    )
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- and the module's args")
    args = parser.parse_args(argv)
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    repeats = max(repeat for repeat, _, _ in args.step)

    # Progress lines go to the original stdout, failures to the original stderr; the
    # benchmark's prints (and anything its libraries write to the descriptors) to the log.
    progress = os.fdopen(os.dup(1), "w", buffering=1)
    errors = os.fdopen(os.dup(2), "w", buffering=1)
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)

    def fail(what: str, code: int) -> int:
        errors.write(f"benchmark failed ({what}), exit {code}, its log ends:\n")
        errors.write(_tail(args.log))
        return code

    started = time.time()
    try:
        namespace = parsed_arguments(args.module, bench_args)
        marks: dict = {}
        run = benchmark_function(args.module, marks)
    except BaseException:  # the module is missing or refuses the arguments
        traceback.print_exc()
        sys.stderr.flush()
        return fail(f"starting {args.module}", 1)
    progress.write(f"benchmark: {args.module} ready in {time.time() - started:.1f} s\n")

    plan = [("warm-up", None, *args.warmup)] if args.warmup else []
    plan += [(f"repeat {r}/{repeats}, concurrency {c}", r, c, n) for r, c, n in args.step]
    for what, repeat, concurrency, prompts in plan:
        progress.write(f"benchmark: {what}, {prompts} prompts\n")
        step = copy.copy(namespace)
        step.max_concurrency, step.num_prompts = concurrency, prompts
        if repeat is None:
            step.output_file = WARMUP_FILE
        marks.clear()
        start = time.time()
        code = _call(run, step, args.timeout)
        if code:
            return fail(what, code)
        span = {"concurrency": concurrency, "start": start, "end": time.time()}
        if "load_start" in marks:
            span["load_start"] = marks["load_start"]
        if repeat is None:
            span.update(label="warm-up", warmup=True)
        else:
            span["repeat"] = repeat
        with open(args.steps, "a") as steps:
            steps.write(json.dumps(span) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
