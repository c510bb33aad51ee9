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
a server whose kernels are warm. Every call gets its own seed (the benchmark's ``--seed`` plus
the call's number; ``run_benchmark`` seeds its prompts with it), so no call sends a prompt an
earlier one sent: a repeated prompt is served from SGLang's prefix (radix) cache, and TTFT and
input throughput would measure cache hits, not prefill; for the same reason the measured calls
send no warm-up request of their own (the module's sends its first prompt twice). Before the
first request, one prompt
is made as the benchmark makes them and counted through the tokenizer's chat template (what
the server counts); with the output length it must fit the server's context length
(``/v1/models`` ``max_model_len``), else the run stops naming both numbers (exit 2). Each
step appends ``{"repeat", "concurrency", "seed", "start", "end"}`` (Unix seconds) to
``--steps`` (the warm-up ``{"label": "warm-up",
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
import urllib.request

WARMUP_FILE = "warmup.jsonl"
LOG_TAIL_LINES = 25
TIMED_OUT = 124
TOO_LONG = 2


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


def served_model(namespace: argparse.Namespace) -> dict:
    """The served model's card from ``/v1/models`` (``id``, ``max_model_len``); {} when the
    server does not answer."""
    base = getattr(namespace, "base_url", None) or (
        f"http://{getattr(namespace, 'host', '127.0.0.1')}:{getattr(namespace, 'port', 30000)}"
    )
    request = urllib.request.Request(base.rstrip("/") + "/v1/models")
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            cards = json.load(answer).get("data") or []
    except (OSError, ValueError):
        return {}
    return next((card for card in cards if isinstance(card, dict)), {})


def prompt_tokens(run, namespace: argparse.Namespace, served_id: str | None) -> int | None:
    """One prompt made as the benchmark makes them, counted as the server will: through the
    tokenizer's chat template for the chat backends. None where the module does not offer
    what this needs (the check is then skipped, said on the progress line)."""
    names = getattr(run, "__globals__", {})
    get_dataset, get_tokenizer = names.get("get_dataset"), names.get("get_tokenizer")
    # As run_benchmark does: without --model, the served model's id names the tokenizer.
    model = getattr(namespace, "model", None) or served_id
    tokenizer_id = getattr(namespace, "tokenizer", None) or model
    if not (callable(get_dataset) and callable(get_tokenizer) and tokenizer_id):
        return None
    tokenizer = get_tokenizer(tokenizer_id)
    probe = copy.copy(namespace)
    probe.num_prompts = 1
    [row, *_] = get_dataset(probe, tokenizer, model)
    text = getattr(row, "prompt", None)
    if not isinstance(text, str):
        return None
    if "chat" in str(getattr(namespace, "backend", "")):
        messages = [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if isinstance(ids, dict) else ids)
    return len(tokenizer.encode(text))


def context_problem(run, namespace: argparse.Namespace) -> str:
    """Why the benchmark's requests cannot fit the server's context, '' when they do; or
    why that could not be checked, starting 'not checked'."""
    card = served_model(namespace)
    limit = card.get("max_model_len")
    if not (isinstance(limit, int) and limit > 0):
        return "not checked: the server's /v1/models names no max_model_len"
    try:
        prompt = prompt_tokens(run, namespace, card.get("id"))
    except Exception as error:  # the module's dataset or tokenizer API: skip, do not guess
        return f"not checked: {type(error).__name__}: {error}"
    if prompt is None:
        return "not checked: this benchmark module makes no prompt to count"
    output = int(getattr(namespace, "random_output_len", 0) or 0)
    if prompt + output <= limit:
        return ""
    asked = getattr(namespace, "random_input_len", None)
    return (
        f"a prompt of {prompt} tokens as the server counts them ({asked} asked; the chat "
        f"template and re-tokenizing add {prompt - int(asked or 0)}) plus {output} output "
        f"tokens is {prompt + output}, over the server's context length of {limit}: lower "
        "bench_input_len or bench_output_len"
    )


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
    problem = context_problem(run, namespace)
    if problem and not problem.startswith("not checked"):
        errors.write(f"benchmark refused before any request: {problem}\n")
        return TOO_LONG
    progress.write(f"benchmark: context length {problem or 'fits'}\n")

    plan = [("warm-up", None, *args.warmup)] if args.warmup else []
    plan += [(f"repeat {r}/{repeats}, concurrency {c}", r, c, n) for r, c, n in args.step]
    base_seed = int(getattr(namespace, "seed", 0) or 0)
    for number, (what, repeat, concurrency, prompts) in enumerate(plan):
        progress.write(f"benchmark: {what}, {prompts} prompts\n")
        step = copy.copy(namespace)
        step.max_concurrency, step.num_prompts = concurrency, prompts
        step.seed = base_seed + number
        # Each call of the module first sends its first prompt alone (its warm-up request,
        # input_requests[0]) and then again in the run: served from the prefix cache the
        # second time. This driver's own warm-up call keeps it; the measured ones do not.
        if repeat is not None and hasattr(step, "warmup_requests"):
            step.warmup_requests = 0
        if repeat is None:
            step.output_file = WARMUP_FILE
        marks.clear()
        start = time.time()
        code = _call(run, step, args.timeout)
        if code:
            return fail(what, code)
        span = {"concurrency": concurrency, "seed": step.seed, "start": start, "end": time.time()}
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
