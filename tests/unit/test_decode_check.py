"""pyinfra_sglang/host_programs/decode_client.py: the decode sanity prompt. SSE parsing on literal
byte streams, the degenerate-output rules, API key files, then the whole check against the
stand-in SGLang server (tests/hosts/standins/sglang) on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import ast
import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pyinfra_sglang.cli import main as cli
from pyinfra_sglang.host_programs import api_key
from pyinfra_sglang.host_programs import decode_client as decode
from pyinfra_sglang.serving.render import render_config_yaml
from tests.unit import test_sglang_standin as standin_server
from tests.unit.test_sglang_standin import TIMEOUT, free_port

# The stand-in server's fixtures, bound here so pytest finds them for this module's tests.
# Assigned, not imported: an imported fixture shadowed by a test's parameter is ruff's F811,
# and silencing F811 once hid a whole parametrized test behind a later one of the same name.
launch = standin_server.launch
tree = standin_server.tree

API_KEY = 'sk-decode "quoted" \\ back:#slash'
SOURCE = Path(decode.__file__)


def clock(*readings: float):
    """A fake clock giving these readings, one per call."""
    return iter(readings).__next__


def chunk(**delta) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


# --- SSE parsing -------------------------------------------------------------------------------


def test_stream_with_reasoning_usage_keep_alives_and_done():
    usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    stream = (
        b": keep-alive\r\n\r\n"
        + chunk(role="assistant", reasoning_content="Think").replace(b"\n", b"\r\n")
        + b"event: message\nid: 7\n"
        + chunk(reasoning_content=" hard.")
        + b"\n\n"  # stray blank lines between events
        + chunk(content="Par")
        + chunk(content="is")
        + b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
        + b"data: "
        + json.dumps({"choices": [], "usage": usage}).encode()
        + b"\n\n"
        + b"data: [DONE]\n\n"
    )
    # One clock reading per event: 4 token chunks at 1.5, 1.7, 1.9, 2.5, then 3 more events.
    got = decode.read_stream(io.BytesIO(stream), sent=1.0, clock=clock(1.5, 1.7, 1.9, 2.5, 3, 3, 3))
    assert got["content"] == "Paris" and got["reasoning"] == "Think hard."
    assert got["ttft_s"] == pytest.approx(0.5)
    assert got["tokens_per_s"] == pytest.approx(3 / 1.0)  # tokens after the first, 1.5 -> 2.5
    assert got["completion_tokens"] == 4 and got["usage_reported"] is True
    assert got["chunks"] == 4 and got["finish_reason"] == "stop"


def test_stream_without_usage_counts_chunks_and_joins_multi_line_data():
    stream = (
        chunk(content="Paris")
        + b'data: {"choices": [{"delta":\ndata: {"content": "!"}}]}\n\n'  # one event, two lines
        + chunk(content=None, reasoning_content=None)  # nothing: not a token
        + b"data:[DONE]"  # no space after the colon, no blank line at the end
    )
    got = decode.read_stream(io.BytesIO(stream), sent=0.0, clock=clock(0.2, 0.6, 0.7, 0.8))
    assert got["content"] == "Paris!" and got["reasoning"] == ""
    assert got["completion_tokens"] == 2 and got["usage_reported"] is False
    assert got["tokens_per_s"] == pytest.approx(1 / 0.4)
    assert got["ttft_s"] == pytest.approx(0.2)


def test_stream_of_one_token_has_no_rate():
    got = decode.read_stream(
        io.BytesIO(chunk(content="Paris") + b"data: [DONE]\n\n"), 0.0, clock(0.1, 0.2)
    )
    assert got["tokens_per_s"] is None and got["completion_tokens"] == 1


@pytest.mark.parametrize(
    ("stream", "detail"),
    [
        (chunk(content="Paris"), "without data: [DONE]"),
        (b"data: {not json\n\n", "not JSON"),
        (b"data: [1, 2]\n\n", "not a JSON object"),
        (b'{"choices": []}\n\n', "not an SSE line"),
        (b"data: [DONE]\n\n" + chunk(content="late"), "data after data: [DONE]"),
        (b"data: \xff\xfe\n\n", "not UTF-8"),
        (chunk(content=7) + b"data: [DONE]\n\n", "delta.content is not a string"),
        (b'data: {"choices": [{"index": 0}]}\n\ndata: [DONE]\n\n', "no delta"),
        (b'data: {"choices": {}}\n\ndata: [DONE]\n\n', "choices is not a list"),
    ],
)
def test_malformed_streams_are_protocol_errors(stream, detail):
    with pytest.raises(decode.ProtocolError) as raised:
        decode.read_stream(io.BytesIO(stream), 0.0, clock(*[1.0] * 10))
    assert raised.value.reason == "protocol-error"
    assert detail in raised.value.detail


def test_an_error_event_is_an_http_error():
    stream = chunk(content="Pa") + b'data: {"error": {"message": "CUDA out of memory"}}\n\n'
    with pytest.raises(decode.CheckFailed) as raised:
        decode.read_stream(io.BytesIO(stream), 0.0, clock(1.0, 1.0))
    assert raised.value.reason == "http-error" and "CUDA out of memory" in raised.value.detail


def test_non_streamed_answer():
    body = {
        "choices": [
            {"message": {"content": "Paris", "reasoning_content": "Hm."}, "finish_reason": "stop"}
        ],
        "usage": {"completion_tokens": 3},
    }
    assert decode.read_completion(json.dumps(body).encode()) == {
        "content": "Paris",
        "reasoning": "Hm.",
        "completion_tokens": 3,
        "finish_reason": "stop",
    }
    for bad in (b"<html>", b'{"choices": []}', b'{"choices": [{"message": "Paris"}]}'):
        with pytest.raises(decode.ProtocolError):
            decode.read_completion(bad)


# --- judging answers ----------------------------------------------------------------------------


REPEATED = "repeated"
UNREADABLE = "non-printable or replacement characters"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("!!!!!!!!", REPEATED),
        ("Paris!!!!!!!!!!!!!!!!!!!!", REPEATED),
        ("<unk><unk><unk><unk><unk><unk><unk><unk>", REPEATED),
        ("the the the the the the the the the the", REPEATED),
        ("\ufffd\ufffd\ufffd abc \ufffd\ufffd defg", "5 of 12 characters are " + UNREADABLE),
        ("\x00\x01\x02\x03 Paris \x04\x05", "6 of 11 characters are " + UNREADABLE),
        (" ".join(["ĠĠ"] * 12), REPEATED),
    ],
)
def test_degenerate_text(text, rule):
    # Each case names the rule that catches it: the unreadable-text rule has cases of its
    # own that no repetition explains (the mutation check removes it: tests/mutation/).
    assert rule in (decode.degenerate_reason(text) or "")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Paris",
        "!!!!!!!",  # too short to judge
        "The capital of France is Paris.",
        "1000000000",  # numbers repeat digits
        "Paris.\n\n" + "-" * 10 + "\nThe capital of France is Paris, on the Seine, a city of "
        "two million people and the seat of the government.",
        "Paris – the city of light. 巴黎是法国的首都。 Ça va?",
    ],
)
def test_not_degenerate(text):
    assert decode.degenerate_reason(text) is None


@pytest.mark.parametrize(
    ("content", "reasoning", "reason"),
    [
        ("The capital is **Paris**.", "", "pass"),
        ("paris", "Thinking.", "pass"),
        ("Parisian food.", "", "wrong-answer"),
        ("Lyon", "", "wrong-answer"),
        ("", "", "empty-output"),
        ("  \n", "I think it is Paris but let me check", "empty-output"),
        ("Paris", "!" * 40, "degenerate-output"),
        ("!" * 40, "", "degenerate-output"),
    ],
)
def test_judge(content, reasoning, reason):
    assert decode.judge(content, reasoning, "Paris")[0] == reason


def test_empty_answer_after_reasoning_says_so():
    reason, detail = decode.judge("", "The user asks for a capital.", "Paris")
    assert reason == "empty-output" and "after 28 characters of reasoning" in detail


# --- the API key file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("sk-plain-key\n", "sk-plain-key"),
        (render_config_yaml(API_KEY), API_KEY),  # as the deploy writes /etc/sglang/sglang.yaml
        ("api-key: 'it''s # not a comment'  # a comment\n", "it's # not a comment"),
        ("---\napi-key: plain-value  # a comment\nport: 30000\n", "plain-value"),
        (render_config_yaml(None), None),  # comments only: no key
        ("port: 30000\napi-key:\n", None),
    ],
)
def test_read_api_key(tmp_path, text, key):
    path = tmp_path / "key"
    path.write_text(text)
    assert api_key.read_api_key(str(path)) == key


@pytest.mark.parametrize("value", ['"sk-secret-open', "'sk-secret-open", '"sk-secret\\q"'])
def test_bad_quoting_fails_without_showing_the_key(tmp_path, value):
    path = tmp_path / "sglang.yaml"
    path.write_text(f"api-key: {value}\n")
    with pytest.raises(ValueError) as raised:
        api_key.read_api_key(str(path))
    assert "sk-secret" not in str(raised.value) and "quotes" in str(raised.value)


# --- runs alone on a host ----------------------------------------------------------------------


def test_source_is_python_3_9_and_standard_library_only():
    tree_ = ast.parse(SOURCE.read_text(), feature_version=(3, 9))
    imported = set()
    for node in ast.walk(tree_):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_runs_alone_with_a_bare_interpreter():
    port = free_port()  # nothing listens there
    # -I -S: no site-packages, no project on the path, as on a bare host.
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(SOURCE), "--url", f"http://127.0.0.1:{port}", "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["reason"] == "connection-refused" and report["ok"] is False
    assert "nothing listens there" in report["message"] and "systemctl" in report["message"]


# --- against the stand-in server -----------------------------------------------------------------


def standin(launch, model: str = "org/model", *args: str, **env: str):
    proc = launch("sglang.launch_server", "--model-path", model, *args, env=env)
    proc.wait_port()
    return proc, f"http://127.0.0.1:{proc.port}"


def ready(launch, model: str = "org/model", *args: str, **env: str):
    proc, url = standin(launch, model, *args, **env)
    proc.wait_status("/health")
    return proc, url


def timed(**kwargs) -> tuple[dict, float]:
    started = time.monotonic()
    result = decode.decode_check(timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)
    json.dumps(result)  # serializable
    assert result["reason"] in decode.REASONS and result["ok"] == (result["reason"] == "pass")
    return result, time.monotonic() - started


def test_pass_with_reasoning(launch):
    proc, url = ready(
        launch,
        "org/model",
        "--served-model-name",
        "glm-5",
        "--reasoning-parser",
        "glm45",
        SGLANG_STANDIN_TOKEN_DELAY_S="0.02",
    )
    result, took = timed(url=url + "/v1")  # an OpenAI base URL works too
    assert result["ok"] is True and result["reason"] == "pass", result["message"]
    assert result["model"] == "glm-5"  # from GET /v1/models
    assert result["answer"] == "The capital of France is Paris."
    assert result["reasoning_chars"] > 0  # reasoning deltas arrived, counted apart
    assert result["completion_tokens"] == 16  # 10 reasoning + 6 answer tokens, from usage
    assert result["stream"]["usage_reported"] is True and result["stream"]["chunks"] == 16
    assert 0.015 <= result["ttft_s"] < 1.0
    assert 5 < result["tokens_per_s"] <= 55  # one token per 20 ms at most
    assert result["non_stream"]["ok"] and result["non_stream"]["completion_tokens"] == 16
    assert "'Paris'" in result["message"] and "glm-5" in result["message"]
    assert took < 5


def test_api_key_from_the_config_file_never_shows(launch, tmp_path, capsys):
    config = tmp_path / "sglang.yaml"
    config.write_text(render_config_yaml(API_KEY))
    proc, url = ready(launch, "org/model", "--config", str(config))
    without, _ = timed(url=url)
    assert without["reason"] == "unauthorized" and without["non_stream"] is None
    assert "401" in without["message"] and "--api-key-file" in without["message"]
    wrong, _ = timed(url=url, api_key="sk-wrong-key")
    assert wrong["reason"] == "unauthorized" and "sk-wrong-key" not in json.dumps(wrong)

    assert cli.main(["decode-check", "--url", url, "--api-key-file", str(config), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is True
    assert cli.main(["decode-check", "--url", url, "--api-key-file", str(config)]) == 0
    line, err2 = capsys.readouterr()
    assert line.startswith("PASS pass (") and line.count("\n") == 1
    assert "back:#slash" not in out + err + line + err2


def test_the_key_is_masked_where_the_server_echoes_it(launch):
    proc, url = ready(launch)
    # The stand-in needs no key, so it answers; the expected word is the key itself.
    result, _ = timed(url=url, api_key="Paris", expect="Lyon")
    assert result["reason"] == "wrong-answer"
    assert "Paris" not in json.dumps(result) and "********" in result["answer"]


@pytest.mark.parametrize("model", ["org/model", "hang/model"])
def test_loading(launch, model):
    proc, url = standin(launch, model, SGLANG_STANDIN_WARMUP_S="30")
    result, took = timed(url=url)
    assert result["ok"] is False and result["reason"] == "loading"
    assert "503" in result["message"] and "GET /health" in result["message"]
    assert took < 5


def test_a_key_a_header_cannot_carry_is_refused_unshown():
    result, _ = timed(url=f"http://127.0.0.1:{free_port()}", api_key="sk-line\nbreak")
    assert result["reason"] == "http-error" and "HTTP header" in result["message"]
    assert "Fix the URL or the API key file." in result["message"]
    assert "sk-line" not in json.dumps(result)


def test_connection_refused():
    result, took = timed(url=f"http://127.0.0.1:{free_port()}")
    assert result["reason"] == "connection-refused" and result["stream"] is None
    assert took < 5


def test_timeout(launch):
    proc, url = ready(launch, SGLANG_STANDIN_TOKEN_DELAY_S="5")
    result, took = timed(url=url, timeout=0.5)
    assert result["reason"] == "timeout", result["message"]
    assert result["stream"]["reason"] == "timeout" and result["non_stream"] is None
    assert "within 0.5 s" in result["message"] and "--timeout" in result["message"]
    assert took < 3  # /health, /v1/models and the stream: each well under the limit


def test_wrong_answer(launch):
    proc, url = ready(launch, "wrong/model")
    result, _ = timed(url=url)
    assert result["reason"] == "wrong-answer"
    assert result["answer"] == "The capital of France is Lyon."
    assert result["stream"]["reason"] == result["non_stream"]["reason"] == "wrong-answer"
    assert "'Paris'" in result["message"] and "Lyon" in result["message"]


def test_degenerate_output(launch):
    proc, url = ready(launch, "garbage/model", "--reasoning-parser", "glm45")
    result, _ = timed(url=url)
    assert result["reason"] == "degenerate-output"
    assert result["answer"] == "!" * 64 and result["completion_tokens"] == 64
    assert "repeated 64 times" in result["message"] and "NaN" in result["message"]


def test_empty_output_when_reasoning_takes_every_token(launch):
    proc, url = ready(launch, "org/model", "--reasoning-parser", "glm45")
    result, _ = timed(url=url, max_tokens=5)
    assert result["reason"] == "empty-output" and result["reasoning_chars"] > 0
    assert result["stream"]["finish_reason"] == "length"


# --- protocol errors over HTTP, from a stub server ------------------------------------------------


class stub_server:
    """A server answering fixed (status, content type, body) per path; 404 elsewhere."""

    def __init__(self, routes: dict):
        routes = {"/v1/models": (200, "application/json", b'{"data": [{"id": "m"}]}'), **routes}

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                status, kind, body = routes.get(self.path, (404, "text/plain", b"no"))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> str:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    ("answer", "reason", "detail"),
    [
        (
            (200, "text/event-stream", chunk(content="Paris")),
            "protocol-error",
            "without data: [DONE]",
        ),
        ((200, "application/json", b'{"choices": []}'), "protocol-error", "not text/event-stream"),
        ((500, "application/json", b'{"message": "boom"}'), "http-error", "answered 500"),
        # /health is not SGLang's here (404: checked no further); the completions answer 503.
        ((503, "application/json", b"{}"), "loading", "answered 503"),
    ],
)
def test_bad_answers_over_http(answer, reason, detail):
    with stub_server({"/v1/chat/completions": answer}) as url:
        result, _ = timed(url=url)
    assert result["reason"] == reason and detail in result["message"]
    assert result["model"] == "m"  # from the stub's /v1/models


# --- the command line ----------------------------------------------------------------------------


def test_cli_exit_codes(launch, tmp_path, capsys):
    proc, url = ready(launch)
    assert cli.main(["decode-check", "--url", url, "--expect", "Paris"]) == 0
    assert capsys.readouterr().out.startswith("PASS pass (ttft ")
    assert cli.main(["decode-check", "--url", url, "--expect", "Berlin", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "wrong-answer"
    assert (
        cli.main(
            [
                "decode-check",
                "--url",
                url,
                "--prompt",
                "Name a colour.",
                "--model",
                "org/model",
                "--expect",
                "canned",
            ]
        )
        == 0
    )
    assert cli.main(["decode-check", "--url", f"http://127.0.0.1:{free_port()}"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAIL connection-refused (")
    missing = tmp_path / "none"
    assert cli.main(["decode-check", "--url", url, "--api-key-file", str(missing)]) == 2
    assert "cannot read --api-key-file" in capsys.readouterr().err
    assert decode.main(["--url", url, "--timeout", "5"]) == 0  # the script's own entry point


# --- the deadline, bounded reads and secrets, against raw loopback servers -----------------------


def _read_request(conn: socket.socket) -> tuple[str, bytes]:
    """The path and body (by Content-Length) of the request on ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return "", b""
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    needed = int(length.group(1)) if length else 0
    while len(body) < needed:
        got = conn.recv(65536)
        if not got:
            break
        body += got
    return head.split(b" ")[1].decode(), body


def _response(status: str, kind: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


MODELS = _response("200 OK", "application/json", b'{"data": [{"id": "m"}]}')
HEALTH = _response("200 OK", "text/plain", b"")
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
SERVER_LIMIT_S = 20.0  # no handler below runs longer, whatever the client does


class raw_server:
    """A loopback TCP server calling ``handler(conn, path, body, stop)`` for each request, each in a
    thread of its own; handlers end when ``stop`` is set (on leaving), or after
    SERVER_LIMIT_S."""

    def __init__(self, handler):
        self.handler, self.stop = handler, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.threads: list[threading.Thread] = []

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(SERVER_LIMIT_S)
                path, body = _read_request(conn)
                if path:
                    self.handler(conn, path, body, self.stop)
            except OSError:  # the client went away: done
                pass

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def __enter__(self) -> str:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.threads.append(thread)
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(TIMEOUT)
        self.listener.close()


def trickle(conn: socket.socket, data: bytes, stop: threading.Event, every_s: float = 0.5):
    """Send ``data`` one byte every ``every_s`` seconds, for SERVER_LIMIT_S at most."""
    ends = time.monotonic() + SERVER_LIMIT_S
    for byte in data:
        if stop.wait(every_s) or time.monotonic() > ends:
            return
        conn.sendall(bytes([byte]))


def _trickle_everything(conn, path, body, stop):
    trickle(conn, HEALTH if path == "/health" else MODELS, stop)


def _trickle_a_stream_line(conn, path, body, stop):
    if path != "/v1/chat/completions":
        conn.sendall(HEALTH if path == "/health" else MODELS)
        return
    conn.sendall(SSE_HEAD)
    trickle(conn, b"data: " + b"x" * 100, stop)


@pytest.mark.parametrize(
    "handler", [_trickle_everything, _trickle_a_stream_line], ids=["status-line", "sse-line"]
)
def test_a_trickling_server_cannot_stretch_the_timeout(handler, capsys):
    with raw_server(handler) as url:
        started = time.monotonic()
        code = cli.main(["decode-check", "--url", url, "--timeout", "3", "--json"])
        took = time.monotonic() - started
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["reason"] == "timeout", result["message"]
    assert "within 3 s" in result["message"]
    assert took < 4, took


def _answers(conn, path, body):
    """Right answers: /health, /v1/models, and Paris, streamed or not."""
    if path == "/health":
        conn.sendall(HEALTH)
    elif path == "/v1/models":
        conn.sendall(MODELS)
    elif json.loads(body).get("stream"):
        conn.sendall(SSE_HEAD + chunk(content="Paris") + b"data: [DONE]\n\n")
    else:
        answer = json.dumps({"choices": [{"message": {"content": "Paris"}}]}).encode()
        conn.sendall(_response("200 OK", "application/json", answer))


def _slow_but_complete(conn, path, body, stop):
    """Every answer whole and right, each after 1 s."""
    if not stop.wait(1.0):
        _answers(conn, path, body)


def test_the_timeout_is_for_the_whole_check_not_each_request():
    # Each request takes 1 s, well under 2.5 s; the four of them together do not.
    with raw_server(_slow_but_complete) as url:
        result, took = timed(url=url, timeout=2.5)
    assert result["reason"] == "timeout" and "within 2.5 s" in result["message"]
    assert took < 3.2, took


def _endless_line(conn, path, body, stop):
    if path != "/v1/chat/completions":
        conn.sendall(HEALTH if path == "/health" else MODELS)
        return
    conn.sendall(SSE_HEAD + b"data: ")
    block = b"x" * 65536
    for _ in range(1024):  # 64 MiB at most, no line end in it
        if stop.is_set():
            return
        conn.sendall(block)


def test_an_endless_stream_line_is_cut_at_its_bound_and_memory_stays_small():
    import tracemalloc

    with raw_server(_endless_line) as url:
        tracemalloc.start()
        try:
            result, took = timed(url=url, timeout=10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result["reason"] == "protocol-error", result["message"]
    assert "a line longer than 1 MiB" in result["message"]
    # The non-streamed call gets the endless answer too: cut at the 8 MiB of a body.
    assert "answered more than 8 MiB" in result["non_stream"]["detail"]
    assert peak < 12 * decode.MIB, peak
    assert took < 5


def _huge_models_body(conn, path, body, stop):
    if path == "/health":
        conn.sendall(HEALTH)
        return
    body = b'{"data": [{"id": "' + b"m" * (9 * decode.MIB) + b'"}]}'
    conn.sendall(_response("200 OK", "application/json", body))


def test_a_body_beyond_its_bound_is_a_protocol_error():
    with raw_server(_huge_models_body) as url:
        result, _ = timed(url=url)
    assert result["reason"] == "protocol-error"
    assert "GET /v1/models answered more than 8 MiB" in result["message"]


ECHOED_KEY = 'sk-"echo"\\' + "0123456789abcdef" * 4  # a quote and a backslash: JSON escapes them


def _echo(kind: str):
    """A server echoing the API key at position ~150 of an error longer than 200 characters:
    raw in a 500 body, JSON-escaped in a 500 body, or in a streamed error event."""
    filler = "x" * 150
    text = filler + ECHOED_KEY + "y" * 200

    def handler(conn, path, body, stop):
        if path == "/health":
            conn.sendall(HEALTH)
        elif path == "/v1/models":
            conn.sendall(MODELS)
        elif kind == "raw":
            conn.sendall(_response("500 Oops", "text/plain", text.encode()))
        elif kind == "json":
            body = json.dumps({"message": text}).encode()
            conn.sendall(_response("500 Oops", "application/json", body))
        else:
            event = json.dumps({"error": {"message": text}}).encode()
            conn.sendall(SSE_HEAD + b"data: " + event + b"\n\n")

    return handler


@pytest.mark.parametrize("kind", ["raw", "json", "stream-event"])
def test_a_key_echoed_in_a_long_error_shows_no_part_of_it(kind, tmp_path, capsys):
    key_file = tmp_path / "key"
    key_file.write_text(ECHOED_KEY)
    with raw_server(_echo(kind)) as url:
        codes = [
            cli.main(["decode-check", "--url", url, "--api-key-file", str(key_file), *json_])
            for json_ in ([], ["--json"])
        ]
    out, err = capsys.readouterr()
    assert codes == [1, 1]
    assert "xxxxxxxx" in out and "http-error" in out  # the error body was quoted
    shown = out + err + out.encode().decode("unicode_escape", "replace")
    secret_part = ECHOED_KEY[10:]  # the part without quotes or backslashes
    windows = {secret_part[i : i + 6] for i in range(len(secret_part) - 5)}
    assert not [w for w in windows if w in shown], shown


def test_url_userinfo_is_never_shown(capsys):
    port = free_port()
    with raw_server(lambda conn, path, body, stop: _answers(conn, path, body)) as served:
        live = served.replace("http://", "http://alice:s3cr3t-pw@")
        checked = [live, f"http://alice:s3cr3t-pw@127.0.0.1:{port}/v1"]  # passes; refused
        refused = [  # by the argument parser
            "ftp://alice:s3cr3t-pw@127.0.0.1/",
            "http://alice:s3cr3t-pw@127.0.0.1:99999",
            "http://alice:s3cr3t-pw@[::1",
            "alice:s3cr3t-pw@127.0.0.1:30000",
        ]
        codes = []
        for url in checked + refused:
            for json_ in ([], ["--json"]):
                try:
                    codes.append(cli.main(["decode-check", "--url", url, "--timeout", "5", *json_]))
                except SystemExit as exit_:
                    codes.append(exit_.code)
    out, err = capsys.readouterr()
    assert codes == [0, 0, 1, 1] + [2] * 8
    assert out.count("PASS pass") == 1 and "http://127.0.0.1:" in out
    assert err.count("argument --url: not an http(s) URL") == 8
    assert "s3cr3t" not in out + err and "alice" not in out + err
    for url in checked + refused[:3]:  # the library's own result
        result = decode.decode_check(url, timeout=5)
        assert "s3cr3t" not in json.dumps(result) and "alice" not in json.dumps(result)


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_timeout_must_be_a_finite_number_above_zero(bad, capsys):
    for entry in (cli.main, lambda argv: decode.main(argv[1:])):
        with pytest.raises(SystemExit) as exit_:
            entry(["decode-check", "--url", "http://127.0.0.1:1", "--timeout", bad])
        assert exit_.value.code == 2
        assert "argument --timeout" in capsys.readouterr().err
    with pytest.raises(ValueError, match="above 0"):
        decode.decode_check("http://127.0.0.1:1", timeout=float(bad) if bad != "soon" else 0)


@pytest.mark.parametrize("empty", ["", " ", "\t\n"])
def test_an_empty_expected_word_is_refused_as_a_check_that_cannot_fail(empty, capsys):
    # An empty word is in every answer: `--expect ""` passed on a real server's noise.
    assert decode.contains_word("noise, more noise", "")
    for entry in (cli.main, lambda argv: decode.main(argv[1:])):
        with pytest.raises(SystemExit) as exit_:
            entry(["decode-check", "--url", "http://127.0.0.1:1", "--expect", empty])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "argument --expect: the expected word must hold a letter or digit" in err
    with pytest.raises(ValueError, match="could not fail"):
        decode.decode_check("http://127.0.0.1:1", expect=empty, timeout=1)
