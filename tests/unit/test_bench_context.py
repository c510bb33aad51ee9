"""The bench driver's context-length check before any request
(pyinfra_sglang/host_programs/bench_driver.py): one prompt made as the benchmark makes them,
counted through the chat template, plus the output length, against the server's
``/v1/models`` ``max_model_len`` (real SGLang 0.5.17's card:
tests/fixtures/sglang-0.5.17-h200/tiny/v1-models.txt)."""

from __future__ import annotations

import argparse
import http.server
import json
import threading
from pathlib import Path

import pytest

from pyinfra_sglang.host_programs import bench_driver

REAL_CARD = (
    Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/tiny/v1-models.txt"
).read_text()


class Row:
    def __init__(self, prompt: str):
        self.prompt = prompt


class Tokenizer:
    """Counts words; the chat template adds 10 tokens, as a role header does."""

    def encode(self, text):
        return text.split()

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return [0] * (len(messages[0]["content"].split()) + 10)


def benchmark_module(words: int):
    """A ``run_benchmark`` whose globals hold the module's dataset and tokenizer loaders."""
    names = {
        "get_tokenizer": lambda _id: Tokenizer(),
        "get_dataset": lambda args, tokenizer, model: [Row("w " * words)] * args.num_prompts,
    }
    exec("def run_benchmark(args):\n    pass\n", names)
    return names["run_benchmark"]


@pytest.fixture
def server():
    """/v1/models as real SGLang answers it, its max_model_len 4096."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = REAL_CARD.encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def namespace(base_url: str, input_len: int, output_len: int) -> argparse.Namespace:
    return argparse.Namespace(
        base_url=base_url,
        backend="sglang-oai-chat",
        model="/tmp/sglmodels/tiny-llama",
        tokenizer=None,
        random_input_len=input_len,
        random_output_len=output_len,
        num_prompts=64,
    )


def test_a_prompt_that_fits_the_servers_context_passes(server):
    assert json.loads(REAL_CARD)["data"][0]["max_model_len"] == 4096
    run = benchmark_module(4000)
    assert bench_driver.context_problem(run, namespace(server, 4000, 86)) == ""
    # Without --model (how the deploy runs it) the card's id names the tokenizer, as
    # run_benchmark does.
    loaded = []
    run.__globals__["get_tokenizer"] = lambda name: loaded.append(name) or Tokenizer()
    bare = namespace(server, 4000, 86)
    bare.model = None
    assert bench_driver.context_problem(run, bare) == ""
    assert loaded == ["/tmp/sglmodels/tiny-llama"]


def test_one_over_it_is_refused_naming_both_numbers(server):
    run = benchmark_module(4000)
    problem = bench_driver.context_problem(run, namespace(server, 4000, 87))
    assert problem == (
        "a prompt of 4010 tokens as the server counts them (4000 asked; the chat template and "
        "re-tokenizing add 10) plus 87 output tokens is 4097, over the server's context length "
        "of 4096: lower bench_input_len or bench_output_len"
    )


def test_without_the_servers_length_or_the_modules_loaders_it_is_not_checked(server):
    missing = bench_driver.context_problem(
        benchmark_module(10), namespace("http://127.0.0.1:9", 10, 1)
    )
    assert missing == "not checked: the server's /v1/models names no max_model_len"
    bare = {}
    exec("def run_benchmark(args):\n    pass\n", bare)
    assert bench_driver.context_problem(bare["run_benchmark"], namespace(server, 10, 1)) == (
        "not checked: this benchmark module makes no prompt to count"
    )
