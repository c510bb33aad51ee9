"""The stand-in SGLang server and router (tests/hosts/standins/sglang*) as a host runs them:
``python -m sglang.launch_server`` and ``python -m sglang_router.launch_router`` in their own
interpreters (standard library only: -S, sources from the index builder on PYTHONPATH), on
127.0.0.1 ports, every wait bounded."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.hosts import pyindex

SGLANG = next(s for s in pyindex.STAND_INS if s.name == "sglang" and s.version == "0.5.23")
ROUTER = next(s for s in pyindex.STAND_INS if s.name == "sglang-router")
SMG = next(s for s in pyindex.STAND_INS if s.name == "smg")
READY_LINE = "The server is fired up and ready to roll!"
TIMEOUT = 15.0  # seconds: the longest any single wait in these tests may take
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
HF_TOKEN = "hf_StandInTokenValue42"
API_KEY = 'sk-standin "quoted" \\ back:#slash'


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The stand-ins' sources, as their wheels lay them out (version.py included)."""
    return source_tree(tmp_path_factory.mktemp("standin-src"), SGLANG, ROUTER, SMG)


def source_tree(root: Path, *specs) -> Path:
    for spec in specs:
        for relative, data in pyindex.source_files(spec).items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(data)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Response:
    def __init__(self, status: int, headers, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def events(self) -> list:
        """SSE data lines: parsed chunks, and "[DONE]" as a string."""
        found = []
        for line in self.body.decode().splitlines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                found.append(data if data == "[DONE]" else json.loads(data))
            else:
                assert line == "", line
        return found


def request(port: int, method: str, path: str, body=None, headers=None) -> Response:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=all_headers)
        response = conn.getresponse()
        return Response(response.status, response, response.read())
    finally:
        conn.close()


def chat(port: int, messages=FRANCE, key: str | None = None, **fields) -> Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return request(
        port,
        "POST",
        "/v1/chat/completions",
        {"model": "m", "messages": messages, **fields},
        headers,
    )


class Proc:
    """One stand-in process; stdout and stderr go to files."""

    def __init__(
        self, args: list[str], env: dict, port: int, run_dir: Path, record: str, logs: Path
    ):
        self.port, self.run_dir, self.record_path = port, run_dir, run_dir / record
        self.stdout_path, self.stderr_path = logs.with_suffix(".out"), logs.with_suffix(".err")
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(args, env=env, stdout=out, stderr=err)
        self.started = time.monotonic()

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    @property
    def record(self) -> dict:
        return json.loads(self.record_path.read_text())

    def wait_port(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not port_open(self.port):
            assert self.popen.poll() is None, f"exited {self.popen.returncode}: {self.stderr}"
            assert time.monotonic() < deadline, "the port never opened"
            time.sleep(0.02)

    def wait_status(self, path: str, status: int = 200) -> float:
        """Poll GET path until it answers status; the seconds since start."""
        self.wait_port()
        deadline = time.monotonic() + TIMEOUT
        while request(self.port, "GET", path).status != status:
            assert self.popen.poll() is None, f"exited {self.popen.returncode}: {self.stderr}"
            assert time.monotonic() < deadline, f"{path} never answered {status}"
            time.sleep(0.02)
        return time.monotonic() - self.started

    def wait_exit(self) -> int:
        return self.popen.wait(timeout=TIMEOUT)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.popen.send_signal(signum)
        return self.wait_exit()


@pytest.fixture
def launch(tree, tmp_path):
    """launch(module, *args, port=, env=, run_dir=) -> Proc; all killed at teardown."""
    started: list[Proc] = []

    def start(
        module: str,
        *args: str,
        port: int | None = None,
        env: dict | None = None,
        run_dir: Path | None = None,
    ) -> Proc:
        if "--port" in args:
            port = int(args[args.index("--port") + 1])
        port = port or free_port()
        run_dir = run_dir or tmp_path / "run"
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(tree),
            "SGLANG_STANDIN_RUN_DIR": str(run_dir),
            "SGLANG_STANDIN_WARMUP_S": "0.2",
            **(env or {}),
        }
        # -S: no site-packages, so the stand-in runs on the standard library alone.
        argv = [sys.executable, "-S", "-m", module, *args]
        if module == "sglang.launch_server" and "--port" not in args:
            argv += ["--port", str(port)]
        record = f"{port}.json" if module == "sglang.launch_server" else f"router-{port}.json"
        proc = Proc(argv, environment, port, run_dir, record, tmp_path / f"proc{len(started)}")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait(timeout=TIMEOUT)


def server(launch, *args: str, **kwargs) -> Proc:
    return launch("sglang.launch_server", "--model-path", "org/model", *args, **kwargs)


def run_standin(tree: Path, module: str, *args: str, timeout: float = TIMEOUT):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(tree),
        "SGLANG_STANDIN_RUN_DIR": str(tree.parent / "run-refused"),
    }
    return subprocess.run(
        [sys.executable, "-S", "-m", module, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- lifecycle -------------------------------------------------------------------------


def test_health_is_503_while_warming_up_then_200(launch, tmp_path):
    # The warm-up is held by a file, not a timer: however slow this machine, every request
    # below is made while the server warms up.
    gate = tmp_path / "ready"
    proc = server(
        launch,
        "--served-model-name",
        "glm-5",
        "--host",
        "127.0.0.1",
        env={
            "SGLANG_STANDIN_WARMUP_S": "0",
            "SGLANG_STANDIN_READY_FILE": str(gate),
            "HF_TOKEN": HF_TOKEN,
        },
    )
    proc.wait_port()
    assert request(proc.port, "GET", "/health").status == 503
    assert request(proc.port, "GET", "/health_generate").status == 503
    assert chat(proc.port).status == 503
    models = request(proc.port, "GET", "/v1/models")  # answers before warm-up is done
    assert models.status == 200
    assert [m["id"] for m in models.json()["data"]] == ["glm-5"]
    assert models.json()["object"] == "list"
    assert READY_LINE not in proc.stdout
    assert proc.record["state"] == "warming_up"

    gate.touch()
    proc.wait_status("/health")
    assert request(proc.port, "GET", "/health_generate").status == 200
    assert proc.stdout.count(READY_LINE) == 1
    record = proc.record
    assert record["state"] == "ready" and record["ready_at"] >= record["started_at"]

    assert proc.stop() == 0
    record = proc.record
    assert (record["state"], record["exit_code"]) == ("stopped", 0)
    assert record["pid"] == proc.popen.pid
    assert record["argv"] == [
        "--model-path",
        "org/model",
        "--served-model-name",
        "glm-5",
        "--host",
        "127.0.0.1",
        "--port",
        str(proc.port),
    ]
    assert record["version"] == "0.5.23"
    assert record["hf_token_set"] is True
    assert record["api_key_set"] is False and record["config_file"] is None
    assert record["settings"]["tp_size"] == 1  # defaults filled in
    assert HF_TOKEN not in proc.record_path.read_text() + proc.stdout + proc.stderr


def test_sigterm_during_warm_up_and_sigint_stop_cleanly(launch):
    warming = server(launch, env={"SGLANG_STANDIN_WARMUP_S": "30"})
    warming.wait_port()
    assert warming.stop() == 0
    assert warming.record["state"] == "stopped"
    assert not port_open(warming.port)
    ready = server(launch)
    ready.wait_status("/health")
    assert ready.record["hf_token_set"] is False
    assert ready.stop(signal.SIGINT) == 0


def stream_in_thread(port: int, tokens: int) -> dict:
    """A streamed chat of exactly ``tokens`` tokens, run in a thread: {"response"} when it
    completed, {"error"} when it was cut."""
    outcome: dict = {}

    def run():
        try:
            outcome["response"] = chat(
                port, stream=True, max_tokens=tokens, ignore_eos=True, messages=FRANCE
            )
        except (http.client.HTTPException, OSError) as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_the_http_process_drains_the_requests_in_flight(launch):
    # KillMode=mixed: systemd signals the main (HTTP) process only.
    proc = server(launch, "--tp-size", "2", env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.02"})
    proc.wait_status("/health")
    schedulers = proc.record["scheduler_pids"]
    assert len(schedulers) == 2 and all(pid_alive(pid) for pid in schedulers)
    outcome = stream_in_thread(proc.port, 100)  # ~2 s of tokens
    time.sleep(0.5)
    proc.popen.send_signal(signal.SIGTERM)
    wait_for(lambda: proc.record["state"] == "draining", "never drained")
    assert not port_open(proc.port)  # no new connection while the old ones finish
    assert proc.wait_exit() == 0
    outcome["thread"].join(TIMEOUT)
    events = outcome["response"].events()
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert sum(1 for delta in deltas if delta.get("content")) == 100
    # Real 0.5.17's lines (tests/fixtures/sglang-0.5.17-h200/tiny/server.log).
    assert "SIGTERM received. signum=None frame=None. Draining requests" in proc.stdout
    assert "Gracefully exiting... Remaining number of requests 0." in proc.stdout
    assert not any(pid_alive(pid) for pid in schedulers)


def test_sigterm_to_every_process_cuts_the_requests_in_flight(launch):
    # KillMode=control-group: the schedulers get SIGTERM too, have no handler, and die.
    proc = server(launch, "--tp-size", "2", env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.02"})
    proc.wait_status("/health")
    outcome = stream_in_thread(proc.port, 100)
    time.sleep(0.5)
    for pid in [proc.popen.pid, *proc.record["scheduler_pids"]]:
        os.kill(pid, signal.SIGTERM)
    assert proc.wait_exit() == 0
    outcome["thread"].join(TIMEOUT)
    assert "error" in outcome, "the stream completed although its scheduler died"
    assert "aborted: the scheduler process exited mid-request" in proc.stderr


def test_offline_it_starts_only_from_the_local_hub_cache(launch, tmp_path):
    # HF_HUB_OFFLINE=1, as the service runs it: the snapshot at the revision, or exit 1 with
    # huggingface_hub's offline error (nothing reaches the Hub).
    cache = tmp_path / "hub"
    commit = "ab" * 20
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    missing = server(launch, "--revision", commit, env=env)
    assert missing.wait_exit() == 1
    assert "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot" in missing.stderr
    assert not port_open(missing.port)
    snapshot = cache / "models--org--model" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--org--model" / "refs").mkdir()
    (cache / "models--org--model" / "refs" / "main").write_text(commit)
    for revision in (commit, "main"):  # a commit, or a branch through refs/
        found = server(launch, "--revision", revision, env=env)
        found.wait_status("/health")
        assert found.record["snapshot"] == str(snapshot)
        assert found.stop() == 0


def test_broken_model_fails_after_a_second_without_serving(launch):
    proc = launch("sglang.launch_server", "--model-path", "broken/GLM-5", "--tp-size", "8")
    opened = False
    while proc.popen.poll() is None:
        opened = opened or port_open(proc.port)
        assert time.monotonic() - proc.started < TIMEOUT
        time.sleep(0.05)
    took = time.monotonic() - proc.started
    assert proc.wait_exit() == 1
    assert not opened
    assert 0.9 <= took < 1 + 5
    assert "RuntimeError: Failed to load model broken/GLM-5" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert READY_LINE not in proc.stdout
    assert (proc.record["state"], proc.record["exit_code"]) == ("failed", 1)


def test_hang_model_opens_the_port_but_never_gets_ready(launch):
    proc = launch("sglang.launch_server", "--model-path", "hang/GLM-5")
    proc.wait_port()
    time.sleep(1.0)  # five times the warm-up
    assert request(proc.port, "GET", "/health").status == 503
    assert request(proc.port, "GET", "/v1/models").status == 200
    assert chat(proc.port).status == 503
    assert proc.record["state"] == "warming_up"
    assert READY_LINE not in proc.stdout
    assert proc.stop() == 0


def test_a_taken_port_or_a_missing_rendezvous_fails_with_exit_1(launch):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        proc = server(launch, port=taken.getsockname()[1])
        assert proc.wait_exit() == 1
    assert "address already in use" in proc.stderr
    assert proc.record["state"] == "failed"
    lonely = server(launch, "--nnodes", "2", "--node-rank", "0")
    assert lonely.wait_exit() == 1
    assert "--dist-init-addr is required" in lonely.stderr


# --- chat ------------------------------------------------------------------------------


def test_chat_completion(launch):
    proc = server(launch, "--served-model-name", "glm-5")
    proc.wait_status("/health")
    answer = chat(proc.port, [{"role": "system", "content": "Be brief."}, *FRANCE])
    assert answer.status == 200
    body = answer.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "The capital of France is Paris."
    assert choice["message"]["reasoning_content"] is None  # no --reasoning-parser
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    parts = [{"type": "text", "text": "Tell me about Germany."}]
    other = chat(proc.port, [{"role": "user", "content": parts}]).json()
    assert "Paris" not in other["choices"][0]["message"]["content"]
    assert (
        other["choices"][0]["message"]["content"]
        == (
            chat(proc.port, [{"role": "user", "content": "anything"}]).json()["choices"][0][
                "message"
            ]["content"]
        )
    )  # deterministic

    short = chat(proc.port, max_tokens=3).json()
    assert short["choices"][0]["message"]["content"] == "The capital of"
    assert short["choices"][0]["finish_reason"] == "length"
    exact = chat(proc.port, max_tokens=20, ignore_eos=True).json()  # as bench_serving asks
    assert exact["usage"]["completion_tokens"] == 20

    bad = request(proc.port, "POST", "/v1/chat/completions", b"{not json")
    assert bad.status == 400
    assert chat(proc.port, messages=[]).status == 400
    assert request(proc.port, "GET", "/nope").status == 404
    assert proc.stop() == 0


def test_chat_stream_with_reasoning_and_usage(launch):
    proc = server(
        launch, "--reasoning-parser", "glm45", env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.02"}
    )
    proc.wait_status("/health")
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=TIMEOUT)
    body = {
        "model": "m",
        "messages": FRANCE,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.monotonic()
    conn.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/event-stream")
    lines, times = [], []
    while line := response.readline():
        if line.strip():
            lines.append(line)
            times.append(time.monotonic() - sent)
    conn.close()
    events = Response(200, None, b"\n\n".join(lines)).events()
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    # As real 0.5.17: the role first, with empty content and no token; every delta names
    # reasoning_content, null where none (tests/fixtures/sglang-0.5.17-h200/tiny).
    assert deltas[0] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert all("reasoning_content" in d for d in deltas)
    kinds = [
        "reasoning_content" if d["reasoning_content"] is not None else "content"
        for d in deltas[1:]
        if d["reasoning_content"] is not None or d.get("content")
    ]
    assert deltas[1]["reasoning_content"]
    first_content = kinds.index("content")
    assert set(kinds[:first_content]) == {"reasoning_content"}
    assert set(kinds[first_content:]) == {"content"}
    content = "".join(d.get("content", "") for d in deltas)
    assert content == "The capital of France is Paris."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == len(kinds)
    assert usage_chunk["usage"]["total_tokens"] == (
        usage_chunk["usage"]["prompt_tokens"] + usage_chunk["usage"]["completion_tokens"]
    )
    # Tokens arrive one by one, 20 ms apart, after the role chunk: time to first token and
    # tokens/s are measurable.
    assert times[1] >= 0.015
    assert times[len(kinds)] - times[1] >= 0.02 * (len(kinds) - 1) * 0.8

    plain = chat(proc.port, stream=True).events()
    assert plain[-1] == "[DONE]" and all(c["choices"] for c in plain[:-1])  # no usage chunk
    no_reasoning = chat(proc.port, separate_reasoning=False).json()
    assert no_reasoning["choices"][0]["message"]["reasoning_content"] is None
    assert proc.stop() == 0


def test_metrics_only_with_enable_metrics(launch):
    without = server(launch)
    without.wait_status("/health")
    assert request(without.port, "GET", "/metrics").status == 404
    with_metrics = server(launch, "--enable-metrics", "--served-model-name", "glm-5")
    with_metrics.wait_status("/health")
    assert chat(with_metrics.port).status == 200
    text = request(with_metrics.port, "GET", "/metrics").body.decode()
    assert 'sglang:num_requests_total{model_name="glm-5"} 1.0' in text
    assert "# TYPE sglang:generation_tokens_total counter" in text
    assert without.stop() == 0 and with_metrics.stop() == 0


def gauge(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(f"sglang:{name}{{"))
    return float(line.rsplit(" ", 1)[1])


def test_requests_beyond_max_running_queue_and_hold_kv_tokens(launch):
    import threading

    proc = server(
        launch,
        "--enable-metrics",
        "--max-running-requests",
        "1",
        "--max-total-tokens",
        "40",
        env={"SGLANG_STANDIN_TOKEN_DELAY_S": "0.2"},
    )
    proc.wait_status("/health")
    callers = [threading.Thread(target=chat, args=(proc.port,)) for _ in range(3)]
    for caller in callers:
        caller.start()
    deadline, seen = time.monotonic() + TIMEOUT, (0.0, 0.0, 0.0)
    while time.monotonic() < deadline and seen[1] < 2:  # one runs, two wait
        text = request(proc.port, "GET", "/metrics").body.decode()
        seen = (
            gauge(text, "num_running_reqs"),
            gauge(text, "num_queue_reqs"),
            gauge(text, "token_usage"),
        )
        time.sleep(0.02)
    assert seen[0] == 1 and seen[1] == 2 and 0 < seen[2] <= 1.0, seen
    for caller in callers:
        caller.join(TIMEOUT)
    text = request(proc.port, "GET", "/metrics").body.decode()
    assert (gauge(text, "num_queue_reqs"), gauge(text, "token_usage")) == (0.0, 0.0)
    assert gauge(text, "num_requests_total") == 3.0
    assert proc.stop() == 0


# --- API key and config file -------------------------------------------------------------


def write_config(path: Path, api_key: str | None) -> Path:
    lines = ["# Managed by pyinfra-sglang; a comment", ""]
    if api_key is not None:
        lines.append(f"api-key: {json.dumps(api_key)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_api_key_from_the_config_file(launch, tmp_path):
    config = write_config(tmp_path / "sglang.yaml", API_KEY)
    proc = server(launch, "--config", str(config), "--enable-metrics", env={"HF_TOKEN": HF_TOKEN})
    proc.wait_status("/health")  # /health needs no key
    assert chat(proc.port).status == 401
    assert chat(proc.port).json() == {"error": "Unauthorized"}
    assert chat(proc.port, key="wrong").status == 401
    assert chat(proc.port, key=API_KEY).status == 200
    assert request(proc.port, "GET", "/v1/models").status == 401
    assert (
        request(
            proc.port, "GET", "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}
        ).status
        == 200
    )
    assert request(proc.port, "GET", "/metrics").status == 200
    assert proc.stop() == 0
    record = proc.record
    assert record["api_key_set"] is True and record["api_key_from"] == "config"
    assert record["config_file"] == str(config) and record["config_keys"] == ["api-key"]
    assert record["settings"]["api_key"] == "********"
    # The record masks the key; the log shows it in server_args=ServerArgs(...), as the real
    # server does (sglang#37457): whoever prints the journal must redact it.
    assert "back:#slash" not in proc.record_path.read_text()
    assert "api_key='" in proc.stdout + proc.stderr
    everything = proc.record_path.read_text() + proc.stdout + proc.stderr
    assert HF_TOKEN not in everything


def test_a_config_file_of_comments_only_sets_nothing(launch, tmp_path):
    proc = server(launch, "--config", str(write_config(tmp_path / "sglang.yml", None)))
    proc.wait_status("/health")
    assert chat(proc.port).status == 200
    assert proc.record["api_key_set"] is False and proc.record["config_keys"] == []
    assert proc.stop() == 0


@pytest.mark.parametrize("form", ["separate", "joined"])
def test_api_key_on_the_command_line_wins_and_is_masked(launch, tmp_path, form):
    config = write_config(tmp_path / "sglang.yaml", "from-config")
    key_args = ["--api-key", "from-argv"] if form == "separate" else ["--api-key=from-argv"]
    proc = server(launch, "--config", str(config), *key_args)
    proc.wait_status("/health")
    assert chat(proc.port, key="from-config").status == 401
    assert chat(proc.port, key="from-argv").status == 200
    assert proc.stop() == 0
    record = proc.record
    assert record["api_key_from"] == "argv"
    masked = ["--api-key", "********"] if form == "separate" else ["--api-key=********"]
    assert record["argv"][4:-2] == masked
    assert "from-argv" not in proc.record_path.read_text()


# --- command lines it refuses --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model-path", "m", "--model-paht", "x"], "unrecognized arguments: --model-paht"),
        (["--model-path", "m", "--tp-szie", "8"], "unrecognized arguments: --tp-szie"),
        # No abbreviations: --served-model is not --served-model-name.
        (["--model-path", "m", "--served-model", "x"], "unrecognized arguments: --served-model"),
        (["--tp-size", "8"], "the following arguments are required: --model-path"),
        (["--model-path", "m", "--tp-size", "eight"], "argument --tp-size: invalid int value"),
        # Removed in 0.5.21: a unit rendered for an older release fails on 0.5.23.
        (["--model-path", "m", "--nsa-prefill-backend", "trtllm"], "--nsa-prefill-backend"),
        (["--model-path", "m", "--cuda-graph-max-bs", "64"], "--cuda-graph-max-bs"),
    ],
)
def test_bad_command_lines_exit_2(tree, args, message):
    result = run_standin(tree, "sglang.launch_server", *args)
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr and message in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.yaml", "api-kee: x\n", "unknown key 'api-kee'"),
        ("c.yaml", "api-key: [a, b]\n", "only scalar values"),
        ("c.yaml", 'api-key: "open\n', "unterminated"),
        ("c.yaml", "  api-key: x\n", "nested values"),
        ("c.toml", 'api-key = "x"\n', "must be a .yaml or .yml file"),
    ],
)
def test_bad_config_files_exit_2(tree, tmp_path, name, text, message):
    config = tmp_path / name
    config.write_text(text)
    result = run_standin(tree, "sglang.launch_server", "--model-path", "m", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_missing_config_file_exits_2(tree, tmp_path):
    missing = tmp_path / "none.yaml"
    result = run_standin(
        tree, "sglang.launch_server", "--model-path", "m", "--config", str(missing)
    )
    assert result.returncode == 2 and "cannot read it" in result.stderr


def test_config_file_yaml_subset(tree):
    text = (
        "# comment\n---\n"
        'api-key: "a\\"b\\\\c \\u00e9 # not a comment"  # a comment\n'
        "served-model-name: 'it''s'\n"
        "tp-size: 8\n"
        "mem-fraction-static: 0.92\n"
        "trust-remote-code: true\n"
        "enable-metrics: off\n"
        "host: 0.0.0.0  # plain scalar\n"
        "quantization: ~\n"
        "reasoning-parser:\n"
    )
    code = (
        "import json, sys; from sglang._standin import args as a; "
        "s = a.parse_config_text(sys.stdin.read()); print(json.dumps([s, a.config_argv(s)]))"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        input=text,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"PYTHONPATH": str(tree)},
        check=True,
    )
    settings, argv = json.loads(result.stdout)
    assert settings == {
        "api-key": 'a"b\\c \u00e9 # not a comment',
        "served-model-name": "it's",
        "tp-size": 8,
        "mem-fraction-static": 0.92,
        "trust-remote-code": True,
        "enable-metrics": False,
        "host": "0.0.0.0",
        "quantization": None,
        "reasoning-parser": None,
    }
    assert argv == [
        "--api-key",
        'a"b\\c \u00e9 # not a comment',
        "--served-model-name",
        "it's",
        "--tp-size",
        "8",
        "--mem-fraction-static",
        "0.92",
        "--trust-remote-code",
        "--host",
        "0.0.0.0",
    ]


# --- multi-node ----------------------------------------------------------------------------


def test_multi_node_head_is_ready_only_when_every_rank_joined(launch, tmp_path):
    dist = f"127.0.0.1:{free_port()}"
    common = ("--nnodes", "2", "--dist-init-addr", dist, "--tp-size", "16")
    head = server(launch, *common, "--node-rank", "0")
    head.wait_port()
    time.sleep(0.8)  # four times the warm-up: only the missing rank keeps it unready
    assert request(head.port, "GET", "/health").status == 503
    other = server(launch, *common, "--node-rank", "1", run_dir=tmp_path / "node1")
    head.wait_status("/health")
    assert head.record["peers_joined"] == [1]
    deadline = time.monotonic() + TIMEOUT
    while other.record["state"] != "joined":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not port_open(other.port)  # ranks 1.. serve no HTTP, as SGLang's
    # Rank 0's shutdown tells the other ranks to exit (SGLang's ShutdownReq broadcast).
    assert head.stop() == 0 and other.wait_exit() == 0
    assert other.record["state"] == "stopped"
    assert "Sent ShutdownReq to node rank 1" in head.stdout


def joined_group(launch, tmp_path) -> tuple:
    dist = f"127.0.0.1:{free_port()}"
    common = ("--nnodes", "2", "--dist-init-addr", dist, "--tp-size", "4")
    head = server(launch, *common, "--node-rank", "0")
    other = server(launch, *common, "--node-rank", "1", run_dir=tmp_path / "node1")
    head.wait_status("/health")
    wait_for(lambda: other.record["state"] == "joined", "rank 1 joined")
    return head, other


def test_from_0_5_21_a_non_zero_rank_waits_for_rank_0s_shutdown(launch, tmp_path):
    head, other = joined_group(launch, tmp_path)  # 0.5.23
    other.popen.send_signal(signal.SIGTERM)
    # As SGLang >= 0.5.21's engine.py: the SIGTERM is logged and otherwise ignored; stopped
    # alone, the rank would wait for systemd's kill timeout.
    wait_for(lambda: "waiting for the rank-0 ShutdownReq broadcast" in other.stderr, "the log")
    time.sleep(1.0)
    assert other.popen.poll() is None and other.record["state"] == "joined"
    stopping = time.monotonic()
    assert head.stop() == 0 and other.wait_exit() == 0
    assert time.monotonic() - stopping < 5
    assert "ShutdownReq from rank 0; exiting" in other.stdout


def test_a_non_zero_rank_whose_rank_0_is_killed_exits_1(launch, tmp_path):
    head, other = joined_group(launch, tmp_path)
    assert head.stop(signal.SIGKILL) != 0
    assert other.wait_exit() == 1 and other.record["state"] == "failed"
    assert "lost rank 0 without a shutdown" in other.stderr


def test_before_0_5_21_a_non_zero_rank_stops_on_sigterm(tmp_path, tmp_path_factory):
    older = dataclasses.replace(SGLANG, version="0.5.20")
    tree = source_tree(tmp_path_factory.mktemp("standin-0.5.20"), older)
    dist = f"127.0.0.1:{free_port()}"
    common = ("--nnodes", "2", "--dist-init-addr", dist)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(tree),
        "SGLANG_STANDIN_WARMUP_S": "0.2",
    }
    procs = []
    try:
        for rank in (0, 1):
            run_dir = tmp_path / f"node{rank}"
            argv = [sys.executable, "-S", "-m", "sglang.launch_server", "--model-path", "org/m"]
            argv += [*common, "--node-rank", str(rank), "--port", str(free_port())]
            env_rank = {**env, "SGLANG_STANDIN_RUN_DIR": str(run_dir)}
            record = f"{argv[-1]}.json"
            procs.append(
                Proc(argv, env_rank, int(argv[-1]), run_dir, record, tmp_path / f"p{rank}")
            )
        head, other = procs
        head.wait_status("/health")
        wait_for(lambda: other.record["state"] == "joined", "rank 1 joined")
        assert other.record["version"] == "0.5.20"
        assert other.stop() == 0  # at once, rank 0 still up
        assert head.popen.poll() is None
        assert head.stop() == 0
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.popen.kill()


# --- router ------------------------------------------------------------------------------


def metrics_on_loopback() -> list[str]:
    """The router's Prometheus listener on a free loopback port (sglang-router 0.3.2 binds it
    to 0.0.0.0:29000 unless told otherwise)."""
    return ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]


def router(launch, urls: list[str], *args: str):
    """The router stand-in in front of ``urls``, on loopback (its metrics too)."""
    return launch(
        "sglang_router.launch_router",
        "--worker-urls",
        *urls,
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        *args,
        *metrics_on_loopback(),
    )


def workers_with_key(launch, tmp_path, key: str, count: int = 2) -> list:
    config = write_config(tmp_path / "workers.yaml", key)
    return [server(launch, "--config", str(config)) for _ in range(count)]


def test_router_retries_a_warming_or_stopped_worker_on_the_next_one(launch, tmp_path):
    # As sgl-router's RetryExecutor: a 503 (a server still warming up) or a refused
    # connection (a server stopped) is tried again on the next worker.
    ready = server(launch)
    warming = server(launch, env={"SGLANG_STANDIN_WARMUP_S": "60"})
    stopped_port = free_port()
    urls = [f"http://127.0.0.1:{p}" for p in (warming.port, stopped_port, ready.port)]
    retrying = router(launch, urls)
    ready.wait_status("/health")
    warming.wait_port()
    retrying.wait_status("/readiness")
    assert chat(warming.port).status == 503
    assert [chat(retrying.port).status for _ in range(6)] == [200] * 6
    # Without retries the warming and the stopped worker's turns fail.
    single = router(launch, urls, "--disable-retries")
    single.wait_status("/readiness")
    assert sorted(chat(single.port).status for _ in range(3)) == [200, 503, 503]


def test_router_in_front_of_two_servers(launch, tmp_path):
    config = write_config(tmp_path / "sglang.yaml", API_KEY)
    workers = [
        server(
            launch,
            "--config",
            str(config),
            "--enable-metrics",
            "--served-model-name",
            "glm-5",
            "--reasoning-parser",
            "glm45",
        )
        for _ in range(2)
    ]
    # A trailing slash, as an inventory's URL may carry.
    urls = [f"http://127.0.0.1:{workers[0].port}/", f"http://127.0.0.1:{workers[1].port}"]
    router = launch(
        "sglang_router.launch_router",
        "--worker-urls",
        *urls,
        "--policy",
        "cache_aware",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        *metrics_on_loopback(),
    )
    for worker in workers:
        worker.wait_status("/health")
    router.wait_status("/readiness")
    assert request(router.port, "GET", "/health").status == 200
    listed = request(router.port, "GET", "/workers").json()
    assert [(w["url"], w["healthy"]) for w in listed["workers"]] == [
        (url.rstrip("/"), True) for url in urls
    ]
    auth = {"Authorization": f"Bearer {API_KEY}"}
    assert request(router.port, "GET", "/v1/models").status == 401  # the workers' answer
    models = request(router.port, "GET", "/v1/models", headers=auth)
    assert models.status == 200 and models.json()["data"][0]["id"] == "glm-5"

    for _ in range(4):
        answer = chat(router.port, key=API_KEY)
        assert answer.status == 200
        assert answer.json()["choices"][0]["message"]["content"] == (
            "The capital of France is Paris."
        )
    streamed = chat(
        router.port, key=API_KEY, stream=True, stream_options={"include_usage": True}
    ).events()
    assert streamed[-1] == "[DONE]"
    assert streamed[0]["choices"][0]["delta"]["role"] == "assistant"
    assert streamed[1]["choices"][0]["delta"]["reasoning_content"]
    assert "Paris" in "".join(
        c["choices"][0]["delta"].get("content", "") for c in streamed[:-1] if c["choices"]
    )
    assert streamed[-2]["usage"]["total_tokens"] > 0
    counts = []
    for worker in workers:
        metrics = request(worker.port, "GET", "/metrics").body.decode()
        [line] = [x for x in metrics.splitlines() if x.startswith("sglang:num_requests_total")]
        counts.append(float(line.split()[-1]))
    assert sorted(counts) == [2.0, 3.0]  # round robin: 5 chats over 2 workers

    # One worker gone: its turns go to the other; then none: not ready, 503.
    assert workers[0].stop() == 0
    assert [chat(router.port, key=API_KEY).status for _ in range(3)] == [200, 200, 200]
    listed = request(router.port, "GET", "/workers").json()
    assert [w["healthy"] for w in listed["workers"]] == [False, True]
    assert request(router.port, "GET", "/readiness").status == 200
    assert workers[1].stop() == 0
    assert request(router.port, "GET", "/readiness").status == 503
    assert request(router.port, "GET", "/health").status == 503
    assert chat(router.port, key=API_KEY).status == 503

    assert router.stop() == 0
    record = router.record
    assert record["standin"] == "sglang-router" and record["pid"] == router.popen.pid
    assert record["worker_urls"] == [url.rstrip("/") for url in urls]
    assert record["policy"] == "cache_aware" and record["state"] == "stopped"


def test_router_without_workers_up_is_not_ready(launch):
    router = launch(
        "sglang_router.launch_router",
        "--worker-urls",
        f"http://127.0.0.1:{free_port()}",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        *metrics_on_loopback(),
    )
    router.wait_port()
    assert request(router.port, "GET", "/readiness").status == 503
    assert request(router.port, "GET", "/liveness").status == 200
    assert router.stop() == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--worker-urls", "http://127.0.0.1:1", "--policy", "fastest"],
        ["--worker-url", "http://127.0.0.1:1"],
        ["--worker-urls", "127.0.0.1:1"],
    ],
)
def test_router_bad_command_lines_exit_2(tree, args):
    result = run_standin(tree, "sglang_router.launch_router", *args)
    assert result.returncode == 2 and "error:" in result.stderr


# --- agreement with what pyinfra-sglang renders --------------------------------------------


def standin_call(tree: Path, code: str, payload) -> object:
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={"PYTHONPATH": str(tree)},
        check=True,
    )
    return json.loads(result.stdout)


def test_flag_table_matches_sglang_flags_toml(tree):
    from pyinfra_sglang.serving.sglang_flags import flag_table

    code = (
        "import json; from sglang._standin.args import FLAGS; "
        "print(json.dumps({f: [k, s, u] for f, k, _, s, u in FLAGS}))"
    )
    standin = standin_call(tree, code, None)
    for entry in flag_table().values():
        for spelling in entry.spellings:
            since = str(spelling.since) if spelling.since else None
            until = str(spelling.until) if spelling.until else None
            assert standin[spelling.flag] == [entry.kind, since, until], spelling.flag


def test_every_rendered_command_line_and_config_is_accepted(tree, tmp_path):
    from pyinfra_sglang.serving.profiles import available_profiles, load_profile
    from pyinfra_sglang.serving.render import render_config_yaml
    from pyinfra_sglang.serving.sglang_flags import FlagVersionError
    from tests.unit.test_render import placed_args

    config = tmp_path / "sglang.yaml"
    config.write_text(render_config_yaml(API_KEY))
    cases = []
    for version in ("0.5.9", "0.5.13", "0.5.14", "0.5.20", "0.5.21", "0.5.22", "0.5.23"):
        for name in available_profiles():
            for nodes in ({}, {"nnodes": 2, "node_rank": 1, "dist_init_addr": "10.0.0.1:50000"}):
                try:
                    argv = placed_args(
                        load_profile(name), version, 8, "0.0.0.0", 30000, str(config), **nodes
                    )
                except FlagVersionError:
                    continue
                cases.append({"version": version, "argv": argv})
    assert len(cases) > 10
    code = (
        "import json, sys; from sglang._standin.args import parse\n"
        "out = []\n"
        "for case in json.load(sys.stdin):\n"
        "    try:\n"
        "        args = parse(case['argv'], case['version']).args\n"
        "        out.append([args.api_key, args.model_path])\n"
        "    except SystemExit as error:\n"
        "        out.append(['exit', error.code])\n"
        "print(json.dumps(out))\n"
    )
    results = standin_call(tree, code, cases)
    for case, (api_key, model) in zip(cases, results):
        assert api_key == API_KEY, case
        assert model == case["argv"][case["argv"].index("--model-path") + 1]


def test_router_api_key_guards_its_routes_and_is_presented_to_the_workers(launch, tmp_path):
    # As sglang-router with --api-key (sgl-project/sglang #10826): clients need the key, the
    # health routes stay open, and workers given on the command line get the router's key.
    workers = workers_with_key(launch, tmp_path, API_KEY)
    metrics = metrics_on_loopback()
    router = launch(
        "sglang_router.launch_router",
        "--worker-urls",
        *[f"http://127.0.0.1:{w.port}" for w in workers],
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--api-key",
        API_KEY,
        *metrics,
    )
    for worker in workers:
        worker.wait_status("/health")
    router.wait_status("/readiness")
    assert request(router.port, "GET", "/health").status == 200
    assert request(router.port, "GET", "/liveness").status == 200
    assert chat(router.port).status == 401
    assert chat(router.port, key="wrong").status == 401
    assert request(router.port, "GET", "/workers").status == 401
    answer = chat(router.port, key=API_KEY)
    assert answer.status == 200 and "Paris" in answer.json()["choices"][0]["message"]["content"]
    # Metrics on their own listener, no key asked; the request above is counted.
    text = request(int(metrics[3]), "GET", "/metrics").body.decode()
    # The real family and labels (sglang-router 0.3.2 and smg: smg_router_requests_total).
    assert (
        'smg_router_requests_total{router_type="http",backend_type="regular",'
        'connection_mode="http",model="m",endpoint="chat",streaming="false"} 1'
    ) in text
    assert router.record["api_key_set"] is True and API_KEY not in json.dumps(router.record)
    assert router.record["prometheus_host"] == "127.0.0.1"
    assert router.stop() == 0


def rendered_router_env(text: str) -> dict[str, str]:
    """An EnvironmentFile's NAME=value lines, unquoted as systemd reads them."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("=", 1)
            values[name] = shlex.split(value)[0] if value else ""
    return values


@pytest.mark.parametrize("package,release", [("sglang-router", "0.3.2"), ("smg", "1.13.0")])
def test_the_rendered_router_unit_runs_with_its_key_off_the_command_line(
    tree, tmp_path, launch, package, release
):
    from pyinfra_sglang.serving.render import RouterSpec, render_router_files
    from tests.unit.test_render import unit_argv

    workers = workers_with_key(launch, tmp_path, API_KEY)
    port, metrics_port = free_port(), free_port()
    unit, env_file = render_router_files(
        RouterSpec(
            worker_urls=tuple(f"http://127.0.0.1:{w.port}" for w in workers),
            host="127.0.0.1",
            port=port,
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
            venv_path="/opt/sglang/venv",
            api_key=API_KEY,
            package=package,
            release=release,
        )
    )
    # ExecStart as systemd runs it, this interpreter in place of the venv's, the stand-ins
    # on PYTHONPATH; the environment as systemd reads the 0600 EnvironmentFile.
    argv = unit_argv(unit.content)
    assert argv[0] == "/opt/sglang/venv/bin/python" and argv[1] == "-c"
    run_dir = tmp_path / "run"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(tree),
        "SGLANG_STANDIN_RUN_DIR": str(run_dir),
        **rendered_router_env(env_file.content),
    }
    router = Proc(
        [sys.executable, "-S", *argv[1:]],
        env,
        port,
        run_dir,
        f"router-{port}.json",
        tmp_path / "rendered-router",
    )
    try:
        for worker in workers:
            worker.wait_status("/health")
        router.wait_status("/readiness")
        cmdline = Path(f"/proc/{router.popen.pid}/cmdline").read_bytes().split(b"\0")
        assert API_KEY.encode() not in b" ".join(cmdline)
        environ = Path(f"/proc/{router.popen.pid}/environ").read_bytes()
        assert b"SGLANG_ROUTER_API_KEY" in environ  # only root (the unit's user) reads it
        assert chat(port).status == 401
        assert chat(port, key=API_KEY).status == 200
        assert request(metrics_port, "GET", "/metrics").status == 200
        record = router.record
        assert (record["standin"], record["version"]) == (package, release)
        assert record["shutdown_grace_period_secs"] == 180
        assert record["api_key_set"] is True and record["host"] == "127.0.0.1"
        assert record["argv"][-2:] == ["--api-key", "********"]
        assert (record["prometheus_host"], record["prometheus_port"]) == (
            "127.0.0.1",
            metrics_port,
        )
    finally:
        if router.popen.poll() is None:
            router.stop()
    assert router.popen.returncode == 0, router.stderr


def test_router_defaults_follow_sglang_router_0_3_2(tree):
    code = (
        "import json; from sglang_router.launch_router import build_parser; "
        "a = build_parser().parse_args([]); "
        "print(json.dumps([a.host, a.prometheus_host, a.prometheus_port, a.api_key]))"
    )
    assert standin_call(tree, code, None) == ["0.0.0.0", "0.0.0.0", 29000, None]


def test_smg_console_script_launches_the_gateway_and_refuses_other_commands(tree, launch):
    # smg.cli:main (the console script's target) as the wheel's entry point names it.
    assert ("smg", "smg.cli:main") in SMG.scripts
    usage = run_standin(tree, "smg")
    assert usage.returncode == 1 and "{launch,serve}" in usage.stdout
    assert run_standin(tree, "smg", "--version").stdout.strip() == "smg 1.13.0"
    assert run_standin(tree, "smg", "launch", "--no-such-flag").returncode == 2
    worker = server(launch)
    gateway = launch(
        "smg",
        "launch",
        "--worker-urls",
        f"http://127.0.0.1:{worker.port}",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--shutdown-grace-period-secs",
        "7",
        *metrics_on_loopback(),
    )
    worker.wait_status("/health")
    gateway.wait_status("/readiness")
    assert chat(gateway.port).status == 200
    assert gateway.record["standin"] == "smg" and gateway.record["shutdown_grace_period_secs"] == 7
    assert gateway.stop() == 0


def router_workers(router_port: int, *args: str, env_file: Path | None = None) -> dict:
    """pyinfra_sglang/host_programs/router_workers.py run as on a router's host."""
    program = Path(__file__).resolve().parents[2] / "pyinfra_sglang/host_programs/router_workers.py"
    extra = ["--env-file", str(env_file)] if env_file else []
    done = subprocess.run(
        [sys.executable, str(program), f"http://127.0.0.1:{router_port}", *args, *extra],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    result = json.loads(done.stdout)
    assert done.returncode == (0 if result["ok"] else 1), (done.stdout, done.stderr)
    return result


def test_a_worker_taken_out_of_the_router_gets_no_request_until_put_back(launch, tmp_path):
    key = "sk-router only in its env file"
    config = write_config(tmp_path / "workers.yaml", key)
    workers = [server(launch, "--config", str(config), "--enable-metrics") for _ in range(2)]
    for worker in workers:
        worker.wait_status("/health")
    urls = [f"http://127.0.0.1:{w.port}" for w in workers]
    front = router(launch, urls, "--api-key", key)
    front.wait_status("/readiness")
    env_file = tmp_path / "sglang-router.env"
    env_file.write_text(f"SGLANG_ROUTER_API_KEY={key}\n")

    def served_by() -> list[float]:
        counts = []
        for worker in workers:
            metrics = request(worker.port, "GET", "/metrics").body.decode()
            [line] = [x for x in metrics.splitlines() if x.startswith("sglang:num_requests_total")]
            counts.append(float(line.split()[-1]))
        return counts

    # Without the key the worker API refuses, and says so.
    refused = router_workers(front.port, "remove", urls[0])
    assert not refused["ok"] and "401" in refused["error"], refused
    listed = request(front.port, "GET", "/workers", headers={"Authorization": f"Bearer {key}"})
    assert [w["url"] for w in listed.json()["workers"]] == urls
    assert all(w["id"] and w["is_healthy"] for w in listed.json()["workers"])

    removed = router_workers(front.port, "remove", urls[0], env_file=env_file)
    assert removed == {
        "ok": True,
        "present": False,
        "healthy": False,
        "workers": [urls[1]],
        "error": None,
    }
    before = served_by()
    assert [chat(front.port, key=key).status for _ in range(4)] == [200] * 4
    after = served_by()
    assert after[0] == before[0] and after[1] == before[1] + 4  # none to the removed one
    again = router_workers(front.port, "remove", urls[0], env_file=env_file)
    assert again["ok"] and again["workers"] == [urls[1]]  # already out: nothing to do

    added = router_workers(front.port, "add", urls[0], env_file=env_file)
    assert added["ok"] and added["present"] and added["healthy"], added
    assert sorted(added["workers"]) == sorted(urls)
    before = served_by()
    assert [chat(front.port, key=key).status for _ in range(4)] == [200] * 4
    assert [b - a for a, b in zip(before, served_by())] == [2.0, 2.0]

    # A worker that never comes up healthy: the add waits, bounded, and says why.
    dead = f"http://127.0.0.1:{free_port()}"
    late = router_workers(front.port, "add", dead, "--timeout", "2", env_file=env_file)
    assert not late["ok"] and "not listed healthy" in late["error"], late
    assert late["present"] and not late["healthy"]
