"""The stand-in of SGLang's serving benchmark (``python -m sglang.bench_serving`` before 0.5.15,
``python -m sglang.benchmark.serving`` from it): real flags, real requests, real measurements.

It sends ``--num-prompts`` streamed chat completions to ``/v1/chat/completions`` of the server
(``--base-url``, else ``http://--host:--port``), at most ``--max-concurrency`` at a time
(threads), ``--request-rate`` per second (inf: all at once), with the API key from
OPENAI_API_KEY as SGLang's OpenAI-style backends read it; measures time to first token,
inter-token latencies and end-to-end latency per request; prints SGLang's result table and
appends one JSON line with SGLang's field names to ``--output-file``. Prompts are words, one
per token (the stand-in server counts tokens so), so no tokenizer and no download are needed:
``random`` and ``random-ids`` both take ``--random-input-len``/``--random-output-len`` and
``--random-range-ratio`` as SGLang does. Standard library only (Python >= 3.9).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

CHAT_BACKENDS = ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat")
# Every backend name of the real parser; the stand-in speaks the chat ones.
BACKENDS = (
    "sglang",
    "sglang-native",
    "sglang-oai",
    *CHAT_BACKENDS,
    "vllm",
    "lmdeploy",
    "trt",
    "gserver",
    "truss",
)
DATASETS = ("sharegpt", "random", "random-ids", "generated-shared-prefix", "mmmu")
GENERATED = ("random", "random-ids")  # what the stand-in makes up without a download
REQUEST_TIMEOUT_S = 600.0  # one request, sent to last byte


def build_parser(prog: str) -> argparse.ArgumentParser:
    """SGLang's bench_serving flags (python/sglang/bench_serving.py's parser)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Benchmark the online serving throughput (test stand-in)."
    )
    add = parser.add_argument
    add("--backend", choices=BACKENDS, default="sglang")
    add("--base-url", default=None)
    add("--host", default="0.0.0.0")
    add("--port", type=int, default=None)
    add("--dataset-name", choices=DATASETS, default="sharegpt")
    add("--dataset-path", default="")
    add("--model", default=None)
    add("--tokenizer", default=None)
    add("--num-prompts", type=int, default=1000)
    add("--sharegpt-output-len", type=int, default=None)
    add("--sharegpt-context-len", type=int, default=None)
    add("--random-input-len", type=int, default=1024)
    add("--random-output-len", type=int, default=1024)
    add("--random-range-ratio", type=float, default=0.0)
    add("--request-rate", type=float, default=float("inf"))
    add("--max-concurrency", type=int, default=None)
    add("--output-file", default=None)
    add("--output-details", action="store_true")
    add("--disable-tqdm", action="store_true")
    add("--disable-stream", action="store_true")
    add("--return-logprob", action="store_true")
    add("--seed", type=int, default=1)
    add("--disable-ignore-eos", action="store_true")
    add("--extra-request-body", default=None)
    add("--apply-chat-template", action="store_true")
    add("--profile", action="store_true")
    add("--lora-name", nargs="*", default=None)
    add("--prompt-suffix", default="")
    add("--pd-separated", action="store_true")
    add("--flush-cache", action="store_true")
    add("--warmup-requests", type=int, default=1)
    add("--tokenize-prompt", action="store_true")
    return parser


@dataclass
class Output:
    """One request's measurements, as SGLang's RequestFuncOutput."""

    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list = field(default_factory=list)
    prompt_len: int = 0
    output_len: int = 0
    error: str = ""


def auth_headers() -> dict:
    key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class Server:
    def __init__(self, base_url: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S)

    def get_json(self, path: str):
        conn = self.connect()
        try:
            conn.request("GET", self.prefix + path, headers=auth_headers())
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path} answered {response.status}")
            return json.loads(body)
        finally:
            conn.close()

    def chat(
        self, model: str, prompt: str, prompt_len: int, output_len: int, args: argparse.Namespace
    ) -> Output:
        """One streamed chat completion, timed as SGLang's async_request_openai_chat_completions
        times it: TTFT to the first token chunk, then the gap before each later one."""
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": output_len,
            "stream": not args.disable_stream,
            "ignore_eos": not args.disable_ignore_eos,
        }
        if args.extra_request_body:
            payload.update(json.loads(args.extra_request_body))
        output = Output(prompt_len=prompt_len, output_len=output_len)
        conn = self.connect()
        start = last = time.perf_counter()
        try:
            conn.request(
                "POST",
                self.prefix + "/v1/chat/completions",
                body=json.dumps(payload),
                headers={"Content-Type": "application/json", **auth_headers()},
            )
            response = conn.getresponse()
            if response.status != 200:
                output.error = f"{response.status} {response.reason}: {response.read()[:200]!r}"
                return output
            if args.disable_stream:
                body = json.loads(response.read())
                output.latency = output.ttft = time.perf_counter() - start
                output.output_len = (body.get("usage") or {}).get("completion_tokens", output_len)
                output.success = True
                return output
            while True:
                line = response.readline()
                if not line:
                    break
                text = line.decode().strip()
                if not text.startswith("data:") or text == "data: [DONE]":
                    continue
                chunk = json.loads(text[len("data:") :])
                delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content"):
                    now = time.perf_counter()
                    if output.ttft == 0.0:
                        output.ttft = now - start
                    else:
                        output.itl.append(now - last)
                    last = now
                output.output_len = (chunk.get("usage") or {}).get(
                    "completion_tokens", output.output_len
                )
            output.latency = time.perf_counter() - start
            output.success = True
        except (OSError, ValueError, http.client.HTTPException) as error:
            output.error = f"{type(error).__name__}: {error}"
        finally:
            conn.close()
        return output


def requests_of(args: argparse.Namespace) -> list:
    """(prompt, prompt_len, output_len) per request, lengths as SGLang's random datasets
    draw them: uniform in [len * range_ratio, len]."""
    rng = random.Random(args.seed)

    def length(full: int) -> int:
        return rng.randint(max(int(full * args.random_range_ratio), 1), full)

    made = []
    for _index in range(args.num_prompts):
        prompt_len, output_len = length(args.random_input_len), length(args.random_output_len)
        words = [f"w{rng.randrange(32000)}" for _ in range(prompt_len)]
        made.append((" ".join(words) + args.prompt_suffix, prompt_len, output_len))
    return made


def _ms(values: list, how) -> float:
    return how(values) * 1000 if values else 0.0


def _p(q: float):
    def percentile(values: list) -> float:
        ordered = sorted(values)
        rank = (len(ordered) - 1) * q / 100
        low, high = math.floor(rank), math.ceil(rank)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    return percentile


def metrics(outputs: list, duration: float) -> dict:
    """SGLang's BenchmarkMetrics from the requests that succeeded."""
    done = [o for o in outputs if o.success]
    ttfts = [o.ttft for o in done]
    itls = [gap for o in done for gap in o.itl]
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in done if o.output_len > 1]
    e2e = [o.latency for o in done]
    total_input = sum(o.prompt_len for o in done)
    total_output = sum(o.output_len for o in done)
    result = {
        "completed": len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "total_output_tokens_retokenized": total_output,
        "request_throughput": len(done) / duration,
        "input_throughput": total_input / duration,
        "output_throughput": total_output / duration,
        "total_throughput": (total_input + total_output) / duration,
    }
    for name, values in (("e2e_latency", e2e), ("ttft", ttfts), ("tpot", tpots), ("itl", itls)):
        result[f"mean_{name}_ms"] = _ms(values, statistics.fmean)
        result[f"median_{name}_ms"] = _ms(values, statistics.median)
        result[f"std_{name}_ms"] = _ms(values, statistics.pstdev)
        result[f"p99_{name}_ms"] = _ms(values, _p(99))
    result["p95_itl_ms"] = _ms(itls, _p(95))
    result["max_itl_ms"] = _ms(itls, max)
    result["concurrency"] = sum(e2e) / duration
    return result


def run(server: Server, model: str, requests: list, args: argparse.Namespace) -> tuple:
    """Send every request, ``--max-concurrency`` at a time; (outputs, seconds)."""
    slots = threading.Semaphore(args.max_concurrency or len(requests) or 1)
    rng = random.Random(args.seed)

    def one(request) -> Output:
        try:
            return server.chat(model, *request, args)
        finally:
            slots.release()

    futures = []
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.max_concurrency or len(requests) or 1) as pool:
        for request in requests:
            slots.acquire()
            futures.append(pool.submit(one, request))
            if not math.isinf(args.request_rate):
                time.sleep(rng.expovariate(args.request_rate))  # Poisson arrivals
        outputs = [f.result() for f in futures]
    return outputs, time.perf_counter() - start


def server_info(server: Server):
    try:
        return server.get_json("/server_info")
    except (OSError, RuntimeError, ValueError):
        return None


def main(prog: str, argv: list | None = None) -> int:
    """``python -m`` of the module: parse, then run_benchmark, as SGLang's cli_main does."""
    try:
        run_benchmark(build_parser(prog).parse_args(argv))
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    return 0


def run_benchmark(args: argparse.Namespace) -> dict:
    """One benchmark with parsed ``args``: SGLang's ``run_benchmark(args_)``, which a caller
    may call many times in one process (the project's bench driver does). Like SGLang it
    exits (SystemExit) when it cannot run and raises when the warm-up fails; returns the
    result it appended to ``--output-file``."""
    if args.backend not in CHAT_BACKENDS or args.dataset_name not in GENERATED:
        print(
            f"{sys.argv[0]} (test stand-in): only --backend {'/'.join(CHAT_BACKENDS)} with "
            f"--dataset-name {'/'.join(GENERATED)} is supported",
            file=sys.stderr,
        )
        sys.exit(2)
    base_url = args.base_url or f"http://{args.host}:{args.port or 30000}"
    server = Server(base_url)
    print(f"benchmark_args={args}")
    try:
        model = args.model or server.get_json("/v1/models")["data"][0]["id"]
    except (OSError, RuntimeError, ValueError, KeyError, IndexError) as error:
        print(f"Failed to fetch model from {base_url}/v1/models. Error: {error}")
        sys.exit(1)
    requests = requests_of(args)
    print(f"Starting warmup with {args.warmup_requests} sequences...")
    warm = (
        [
            server.chat(model, requests[0][0], requests[0][1], min(requests[0][2], 32), args)
            for _ in range(args.warmup_requests)
        ]
        if requests
        else []
    )
    if warm and not any(o.success for o in warm):
        raise ValueError(
            f"Warmup failed - Please make sure benchmark arguments are correctly "
            f"specified. Error: {warm[0].error}"
        )
    outputs, duration = run(server, model, requests, args)
    result = {
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "duration": duration,
        **metrics(outputs, duration),
        # Real bench_serving (0.5.17) copies GET /server_info into every line: the server's
        # settings, its api_key in clear among them.
        "server_info": server_info(server),
    }
    print_table(result)
    for error in sorted({o.error for o in outputs if o.error}):
        print(f"request failed: {error}")
    default_name = (
        f"{args.backend}_{datetime.now().strftime('%m%d')}_{args.num_prompts}_"
        f"{args.random_input_len}_{args.random_output_len}.jsonl"
    )
    with open(args.output_file or default_name, "a") as out:
        out.write(json.dumps(result) + "\n")
    return result


def print_table(result: dict) -> None:
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    rows = (
        ("Backend:", "backend"),
        ("Max request concurrency:", "max_concurrency"),
        ("Successful requests:", "completed"),
        ("Benchmark duration (s):", "duration"),
        ("Total input tokens:", "total_input_tokens"),
        ("Total generated tokens:", "total_output_tokens"),
        ("Request throughput (req/s):", "request_throughput"),
        ("Output token throughput (tok/s):", "output_throughput"),
        ("Total token throughput (tok/s):", "total_throughput"),
        ("Median TTFT (ms):", "median_ttft_ms"),
        ("Median ITL (ms):", "median_itl_ms"),
    )
    for label, key in rows:
        value = result[key]
        print(f"{label:<40} {value:<10.2f}" if isinstance(value, float) else f"{label:<40} {value}")
    print("=" * 50)
