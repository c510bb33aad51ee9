"""The stand-in SGLang server: SGLang's HTTP surface on a ThreadingHTTPServer, no model.

Lifecycle, as SGLang's: start, warm up (/health answers 503), then "The server is fired up
and ready to roll!" and /health answers 200. Processes, as SGLang's: this HTTP (main) process
and one scheduler child per tensor-parallel rank (``scheduler.py``), which generates the
tokens and has no SIGTERM handler. SIGTERM or SIGINT to the main process drain it: it stops
accepting connections, finishes the requests in flight, then tells the schedulers to exit
and exits 0. A scheduler killed under a request cuts that request's stream short.
Model paths starting ``broken/`` fail to load (exit 1, port never opened); ``hang/`` opens
the port and never gets ready; ``wrong/`` answers France's capital wrongly (Lyon);
``garbage/`` answers 64 "!" tokens, as a model whose numbers went bad (NaN logits). On a
multi-node start, rank 0 is ready only once the other ranks have joined it at
--dist-init-addr, and ranks 1.. serve no HTTP (as SGLang's). A joined rank keeps its
connection to rank 0 open: rank 0's shutdown sends "shutdown" over it (SGLang's ShutdownReq
broadcast to every TP rank), and the rank exits on it. From 0.5.21 a joined non-zero rank
ignores SIGTERM and waits for that broadcast, as SGLang's engine.py does from 0.5.21 (its
SIGTERM handler on node_rank >= 1 only logs "waiting for the rank-0 ShutdownReq broadcast"):
stopped alone, it runs into systemd's kill timeout. A rank whose rank 0 went away without a
broadcast (killed) exits 1.

Environment: SGLANG_STANDIN_RUN_DIR (record folder, default /run/sglang-standin),
SGLANG_STANDIN_WARMUP_S (default 2; its first part, SGLANG_STANDIN_LOAD_S, with nothing
listening), SGLANG_STANDIN_TOKEN_DELAY_S (default 0.005;
4.6 times that with --disable-cuda-graph),
SGLANG_STANDIN_FAIL_S (how long a broken/ model takes to fail, default 1),
SGLANG_STANDIN_MAX_MEM_FRACTION (a --mem-fraction-static above it fails to start, out of
memory),
SGLANG_STANDIN_READY_FILE (warm-up also lasts until this file exists: tests hold the warm-up
as long as they need, instead of racing a timer); HF_TOKEN is only noted as set or not.

A server that hangs while alive (sgl-project/sglang #6624, #4191): while the file
``<record folder>/<port>.hang-generation`` holds the server's pid, /health still answers 200
and chat completions never answer (until the server stops); a restart, a new pid, clears it.

A server saturated by other work: while ``<record folder>/<port>.saturated`` holds the
server's pid, a new chat completion waits in the queue (until the file goes or the server
stops) while the other load keeps the token counters moving at SATURATED_TOKENS_S, as a
server busy with long prefills: its requests are slow, yet it progresses.

A real /metrics replayed: while ``<record folder>/<port>.metrics`` exists, /metrics answers
its text (a capture of a real SGLang's /metrics, tests/fixtures/sglang-*/), not the
stand-in's own counters.

Logs, as SGLang does, its arguments at start (``server_args=ServerArgs(...)``), the API key
unmasked; its record file masks it.
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from sglang._standin import args as cli
from sglang._standin import weights
from sglang._standin.chat import BadRequest, Completion
from sglang._standin.releases import NONZERO_RANK_WAITS_FOR_RANK0, at_least
from sglang.version import __version__

READY_LINE = "The server is fired up and ready to roll!"
# Share of the warm-up spent loading, before the HTTP server listens (real: 146 of 158 s).
LOAD_SHARE = 0.6
# Real 0.5.17's refusal of a request without the key, byte for byte (compact JSON).
UNAUTHORIZED = b'{"error":"Unauthorized"}'
MAX_LOAD_S = 1.0
DEFAULT_RUN_DIR = "/run/sglang-standin"
# Decode with CUDA graphs off against on, real SGLang 0.5.17 on one H200 (4237 / 916 tok/s).
GRAPHS_OFF_SLOWDOWN = 4.6
# The other load of a saturated server: about real 0.5.17's decode rate at concurrency 32 on
# one H200 (4237 tok/s, tests/fixtures/sglang-0.5.17-h200/tune).
SATURATED_TOKENS_S = 4000
SATURATED_STEP_S = 0.1
# Non-secret variables of the service's environment worth asserting on.
RECORDED_ENV = (
    "HF_HOME",
    "FLASHINFER_WORKSPACE_BASE",
    "SGLANG_DG_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "TVM_FFI_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "XDG_CACHE_HOME",
    "CUDA_HOME",
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
)
MAX_BODY = 64 * 1024 * 1024


def env_seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def log(message: str, stream=None) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", file=stream or sys.stdout, flush=True)


class Record:
    """The JSON file tests read: what the server was started with and where it is."""

    def __init__(self, path: Path, data: dict):
        self.path = path
        self.data = data
        self.lock = threading.Lock()
        self.write()

    def update(self, **values) -> None:
        with self.lock:
            self.data.update(values)
        self.write()

    def write(self) -> None:
        with self.lock:
            text = json.dumps(self.data, indent=2, sort_keys=True) + "\n"
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
                partial.write_text(text)
                os.replace(partial, self.path)
            except OSError as error:
                log(f"WARNING sglang stand-in: cannot write {self.path}: {error}", sys.stderr)


class SchedulerGone(Exception):
    """The scheduler process died under a request."""


class Schedulers:
    """The scheduler children, one per tensor-parallel rank; rank 0 generates the tokens."""

    def __init__(self, tp_size: int):
        self.name = f"sglang-standin-scheduler-{os.getpid()}"
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "sglang._standin.scheduler", self.name, str(rank)],
                stdin=subprocess.PIPE,
            )
            for rank in range(max(1, tp_size))
        ]

    def up(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect("\0" + self.name)
            return True
        except OSError:
            return False

    def tokens(self, count: int, delay: float):
        """Yields once per token as rank 0 generates it; SchedulerGone when it dies first."""
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect("\0" + self.name)
            conn.sendall(f"{count} {delay}\n".encode())
        except OSError as error:
            raise SchedulerGone(str(error)) from None
        with conn:
            for _ in range(count):
                try:
                    got = conn.recv(1)
                except OSError:
                    got = b""
                if not got:
                    raise SchedulerGone("the scheduler process exited mid-request")
                yield

    def stop(self) -> None:
        """Tell every scheduler to exit (close its pipe), and wait for it."""
        for process in self.processes:
            if process.stdin:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


class State:
    def __init__(self, parsed: cli.Parsed):
        args = parsed.args
        self.args = args
        self.schedulers: Schedulers | None = None
        self.api_key = args.api_key
        self.model_name = args.served_model_name or args.model_path
        self.token_delay = env_seconds("SGLANG_STANDIN_TOKEN_DELAY_S", 0.005)
        if args.disable_cuda_graph:
            # Real SGLang 0.5.17 on one H200 decoded 4.6x slower with CUDA graphs off (916
            # against 4237 tok/s at concurrency 32: tests/fixtures/sglang-0.5.17-h200/tune).
            self.token_delay *= GRAPHS_OFF_SLOWDOWN
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.started = time.time()
        self.lock = threading.Lock()
        self.counters = {
            "num_requests_total": 0,
            "prompt_tokens_total": 0,
            "generation_tokens_total": 0,
            "num_running_reqs": 0,
            "num_queue_reqs": 0,
            "used_tokens": 0,
            # sglang:realtime_tokens_total (0.5.17): each prefill and decode step counts.
            "realtime_prefill_compute": 0,
            "realtime_decode": 0,
        }
        # Generation hangs while this file names this process (generation_hung).
        self.hang_file: Path | None = None
        self.saturated_file: Path | None = None
        self.metrics_file: Path | None = None
        self.peers: set[int] = set()
        self.peer_conns: dict[int, socket.socket] = {}  # rank -> its open rendezvous connection
        self.joined = False  # a non-zero rank, once rank 0 accepted it
        # As SGLang's scheduler: at most --max-running-requests run at once, the rest queue;
        # the KV cache holds --max-total-tokens (token_usage = tokens of running requests).
        self.running_slots = threading.BoundedSemaphore(args.max_running_requests or 1024)
        self.max_total_tokens = args.max_total_tokens or 500_000

    def in_flight(self) -> int:
        with self.lock:
            return self.counters["num_running_reqs"] + self.counters["num_queue_reqs"]

    def count(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                self.counters[name] += delta


def generation_hung(state: State) -> bool:
    """Does generation hang in this process? While ``<run dir>/<port>.hang-generation`` holds
    its pid: a test hangs the running server, and a restart (a new process) clears it, as a
    restart clears a real hang."""
    try:
        return state.hang_file is not None and state.hang_file.read_text().strip() == str(
            os.getpid()
        )
    except OSError:
        return False


def saturated(state: State) -> bool:
    """Is this process saturated by other work? While ``<run dir>/<port>.saturated`` holds
    its pid (as generation_hung)."""
    try:
        return state.saturated_file is not None and state.saturated_file.read_text().strip() == (
            str(os.getpid())
        )
    except OSError:
        return False


def other_load(state: State) -> None:
    """The work of the other clients while the server is saturated: tokens at
    SATURATED_TOKENS_S, in steps of SATURATED_STEP_S."""
    while not state.stop.wait(SATURATED_STEP_S):
        if saturated(state):
            step = int(SATURATED_TOKENS_S * SATURATED_STEP_S)
            state.count(realtime_decode=step, generation_tokens_total=step)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: State  # set on the subclass made per server

    # --- plumbing ------------------------------------------------------------------

    def log_message(self, format, *args):
        pass

    def log_request(self, code="-", size="-"):
        code = getattr(code, "value", code)
        print(
            f"INFO:     {self.client_address[0]}:{self.client_address[1]} - "
            f'"{self.requestline}" {code}',
            flush=True,
        )

    def send_body(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, value, headers: dict | None = None) -> None:
        self.send_body(status, json.dumps(value).encode(), headers=headers)

    def send_error_json(self, status: int, message: str) -> None:
        kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
        self.send_json(
            status,
            {
                "object": "error",
                "message": message,
                "type": kind.get(status, "Error"),
                "param": None,
                "code": status,
            },
        )

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise BadRequest("request body too large")
        return self.rfile.read(length)

    def authorized(self, path: str) -> bool:
        """SGLang's rule: with an API key, everything but /health* and /metrics needs
        ``Authorization: Bearer <key>``."""
        key = self.state.api_key
        if not key or path.startswith("/health") or path.startswith("/metrics"):
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

    # --- routes --------------------------------------------------------------------

    def do_GET(self):
        path = urlsplit(self.path).path
        if not self.authorized(path):
            return self.send_body(401, UNAUTHORIZED, "application/json")
        state = self.state
        if path in ("/health", "/health_generate"):
            return self.send_body(200 if state.ready.is_set() else 503, b"", "text/plain")
        if path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [self.model_card()]})
        if path == "/v1/models/" + state.model_name:
            return self.send_json(200, self.model_card())
        if path == "/get_model_info":
            return self.send_json(
                200,
                {
                    "model_path": state.args.model_path,
                    "tokenizer_path": state.args.tokenizer_path or state.args.model_path,
                    "is_generation": True,
                },
            )
        if path in ("/get_server_info", "/server_info"):
            # As real SGLang 0.5.17's: the settings with the API key in clear, to a caller that
            # holds it (tests/fixtures/sglang-0.5.17-h200/get_server_info.txt, key masked there
            # by the capture); bench_serving copies this into every result line.
            info = dict(sorted(vars(state.args).items()))
            info["version"] = __version__
            return self.send_json(200, info)
        if path == "/metrics" and state.args.enable_metrics:
            return self.send_body(
                200, self.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        return self.send_json(404, {"detail": "Not Found"})

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        path = urlsplit(self.path).path
        try:
            body = self.read_body()
        except (BadRequest, ValueError) as error:
            self.close_connection = True
            return self.send_error_json(400, str(error))
        if not self.authorized(path):
            return self.send_body(401, UNAUTHORIZED, "application/json")
        if path != "/v1/chat/completions":
            return self.send_json(404, {"detail": "Not Found"})
        if not self.state.ready.is_set():
            return self.send_error_json(503, "The server is not ready yet (warming up)")
        if generation_hung(self.state):
            # Alive but hung (sgl-project/sglang #6624, #4191): /health keeps answering 200,
            # the request never gets a byte back. It ends only when the server stops.
            self.state.stop.wait()
            self.close_connection = True
            return None
        if saturated(self.state):
            # Queued behind the other load until it eases (or the server stops).
            self.state.count(num_queue_reqs=1)
            try:
                while saturated(self.state) and not self.state.stop.wait(SATURATED_STEP_S):
                    pass
            finally:
                self.state.count(num_queue_reqs=-1)
        try:
            request = json.loads(body or b"null")
            if not isinstance(request, dict):
                raise BadRequest("the request body must be a JSON object")
            reasoning = bool(self.state.args.reasoning_parser) and request.get(
                "separate_reasoning", True
            )
            completion = Completion(
                request, self.state.model_name, reasoning, self.state.args.model_path
            )
        except ValueError as error:  # BadRequest and JSON errors
            return self.send_error_json(400, str(error))
        tokens = completion.prompt_tokens + completion.completion_tokens
        self.state.count(num_requests_total=1, num_queue_reqs=1)
        with self.state.running_slots:
            self.state.count(
                num_queue_reqs=-1,
                num_running_reqs=1,
                used_tokens=tokens,
                prompt_tokens_total=completion.prompt_tokens,
                realtime_prefill_compute=completion.prompt_tokens,
            )
            try:
                if request.get("stream"):
                    options = request.get("stream_options") or {}
                    self.stream(completion, bool(options.get("include_usage")))
                else:
                    try:
                        for _ in self.generated(completion.completion_tokens):
                            pass
                    except SchedulerGone as error:
                        return self.send_error_json(500, f"scheduler died: {error}")
                    self.send_json(200, completion.response())
            finally:
                self.state.count(
                    num_running_reqs=-1,
                    used_tokens=-tokens,
                    generation_tokens_total=completion.completion_tokens,
                )

    def stream(self, completion: Completion, include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        generated = self.generated(completion.completion_tokens)
        try:
            for chunk in completion.stream(include_usage):
                if chunk is None:
                    next(generated)
                else:
                    self.write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self.write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream
        except SchedulerGone as error:
            # The stream ends without its last chunk: the client sees a cut response.
            log(f"ERROR request {completion.id} aborted: {error}", sys.stderr)
            self.close_connection = True

    def generated(self, count: int):
        """One step per token, at the server's pace, from the rank-0 scheduler process; each
        counted as SGLang counts a decode step."""
        for token in self.state.schedulers.tokens(count, self.state.token_delay):
            self.state.count(realtime_decode=1)
            yield token

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def model_card(self) -> dict:
        name = self.state.model_name
        return {
            "id": name,
            "object": "model",
            "created": int(self.state.started),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.state.args.context_length or 131072,
        }

    def metrics(self) -> str:
        try:
            if self.state.metrics_file is not None:
                return self.state.metrics_file.read_text()
        except OSError:
            pass  # no capture to replay: the stand-in's own counters
        with self.state.lock:
            counters = dict(self.state.counters)
        label = '{model_name="%s"}' % self.state.model_name.replace('"', '\\"')
        counters["token_usage"] = min(1.0, counters["used_tokens"] / self.state.max_total_tokens)
        lines = []
        for name, kind, text in (
            ("num_running_reqs", "gauge", "The number of running requests."),
            ("num_queue_reqs", "gauge", "The number of requests in the waiting queue."),
            ("token_usage", "gauge", "The token usage."),
            ("num_requests_total", "counter", "Number of requests processed."),
            ("prompt_tokens_total", "counter", "Number of prefill tokens processed."),
            ("generation_tokens_total", "counter", "Number of generation tokens processed."),
        ):
            lines += [
                f"# HELP sglang:{name} {text}",
                f"# TYPE sglang:{name} {kind}",
                f"sglang:{name}{label} {float(counters[name])}",
            ]
        lines += [
            "# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on "
            "each log interval). mode: prefill_compute, prefill_cache, decode.",
            "# TYPE sglang:realtime_tokens_total counter",
        ]
        for mode in ("prefill_compute", "decode"):
            mode_label = label[:-1] + f',mode="{mode}"}}'
            lines.append(
                f"sglang:realtime_tokens_total{mode_label} {float(counters['realtime_' + mode])}"
            )
        return "\n".join(lines) + "\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def make_server(state: State) -> Server:
    handler = type("StandInHandler", (Handler,), {"state": state})
    host = state.args.host
    Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return Server((host, state.args.port), handler)


# --- multi-node rendezvous ---------------------------------------------------------------


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def rendezvous_head(state: State) -> socket.socket:
    """Rank 0: accept the other ranks at --dist-init-addr; each sends "rank N"."""
    host, port = split_addr(state.args.dist_init_addr)
    try:
        listener = socket.create_server((host, port), reuse_port=False)
    except OSError as error:
        if error.errno != errno.EADDRNOTAVAIL:
            raise
        listener = socket.create_server(("", port))
    listener.settimeout(0.5)

    def accept() -> None:
        while not state.stop.is_set():
            try:
                peer, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            peer.settimeout(5)
            try:
                words = peer.makefile("r").readline().split()
                rank = int(words[1]) if len(words) == 2 and words[0] == "rank" else -1
                if not 0 < rank < state.args.nnodes:
                    peer.close()
                    continue
                peer.sendall(b"ok\n")
                # Kept open: the shutdown broadcast goes over it.
                previous = state.peer_conns.pop(rank, None)
                if previous is not None:
                    previous.close()
                state.peer_conns[rank] = peer
                if rank not in state.peers:
                    state.peers.add(rank)
                    joined = len(state.peers) + 1
                    log(f"Node rank {rank} joined ({joined}/{state.args.nnodes} nodes)")
            except (OSError, ValueError):
                peer.close()

    threading.Thread(target=accept, name="rendezvous", daemon=True).start()
    return listener


def broadcast_shutdown(state: State) -> None:
    """Rank 0's shutdown: every joined rank is told to exit (SGLang's ShutdownReq)."""
    for rank, conn in sorted(state.peer_conns.items()):
        try:
            conn.sendall(b"shutdown\n")
            log(f"Sent ShutdownReq to node rank {rank}")
        except OSError:
            pass
        conn.close()
    state.peer_conns.clear()


def rendezvous_join(state: State) -> socket.socket | None:
    """Ranks 1..: connect to rank 0 until it answers (or the server is stopped); the
    connection stays open for rank 0's shutdown broadcast."""
    host, port = split_addr(state.args.dist_init_addr)
    waiting_logged = False
    while not state.stop.is_set():
        try:
            conn = socket.create_connection((host, port), timeout=2)
            conn.sendall(f"rank {state.args.node_rank}\n".encode())
            if conn.makefile("r").readline().strip() == "ok":
                conn.settimeout(None)
                return conn
            conn.close()
        except OSError:
            pass
        if not waiting_logged:
            log(f"Waiting for node rank 0 at {host}:{port}")
            waiting_logged = True
        state.stop.wait(0.5)
    return None


def await_rank0(state: State, conn: socket.socket) -> int:
    """A joined rank runs until rank 0's broadcast (exit 0), or until rank 0 is gone without
    one (exit 1, as a rank whose collective peers vanished)."""
    outcome: list[int] = []

    def listen() -> None:
        try:
            line = conn.makefile("r").readline().strip()
        except OSError:
            line = ""
        if line == "shutdown":
            log(f"Node rank {state.args.node_rank}: ShutdownReq from rank 0; exiting")
            outcome.append(0)
        elif not state.stop.is_set():
            log(f"Node rank {state.args.node_rank}: lost rank 0 without a shutdown", sys.stderr)
            outcome.append(1)
        state.stop.set()

    threading.Thread(target=listen, name="rank0", daemon=True).start()
    state.stop.wait()
    conn.close()
    return outcome[0] if outcome else 0


# --- main ------------------------------------------------------------------------------


def fail_out_of_memory(state: State, record: Record) -> int:
    """As SGLang when the static memory fraction leaves too little for CUDA graph capture."""
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=6.10 GB")
    log(
        "Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. (sglang test stand-in: --mem-fraction-static "
        f"{state.args.mem_fraction_static} > SGLANG_STANDIN_MAX_MEM_FRACTION)",
        sys.stderr,
    )
    log("Received sigquit from a child process. It usually means the child failed.", sys.stderr)
    record.update(state="failed", exit_code=1, stopped_at=time.time())
    return 1


def fail_loading(state: State, record: Record) -> int:
    model = state.args.model_path
    log(f"Load weight begin. avail mem=94.50 GB (model {model})")
    if state.stop.wait(env_seconds("SGLANG_STANDIN_FAIL_S", 1.0)):
        record.update(state="stopped", exit_code=0, stopped_at=time.time())
        return 0
    here = Path(__file__).resolve().parent.parent / "srt"
    message = (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{here}/managers/scheduler.py", line 2960, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, "
        "pp_rank, dp_rank)\n"
        f'  File "{here}/model_executor/model_runner.py", line 841, in load_model\n'
        "    self.model = get_model(model_config=self.model_config, "
        "load_config=self.load_config)\n"
        f"RuntimeError: Failed to load model {model}: no loadable checkpoint "
        "(config.json, *.safetensors) found (sglang test stand-in)"
    )
    log(message, sys.stderr)
    log("Received sigquit from a child process. It usually means the child failed.", sys.stderr)
    record.update(state="failed", exit_code=1, stopped_at=time.time())
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = cli.parse(argv)  # exits 2 on a bad command line
    state = State(parsed)
    args = state.args

    waits_for_rank0 = (
        args.nnodes > 1
        and args.node_rank > 0
        and at_least(__version__, NONZERO_RANK_WAITS_FOR_RANK0)
    )

    def on_signal(signum, frame):
        if waits_for_rank0 and state.joined and signum == signal.SIGTERM:
            # SGLang >= 0.5.21 (entrypoints/engine.py): the handler only logs.
            log(
                f"SIGTERM received on node_rank {args.node_rank}; waiting for the rank-0 "
                "ShutdownReq broadcast to stop the schedulers.",
                sys.stderr,
            )
            return
        # Not state.stop.set() here: the handler may run while this thread holds the
        # event's lock (inside Event.wait), and that lock is not reentrant.
        threading.Thread(target=state.stop.set, name="signal", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    run_dir = Path(os.environ.get("SGLANG_STANDIN_RUN_DIR") or DEFAULT_RUN_DIR)
    state.hang_file = run_dir / f"{args.port}.hang-generation"
    state.saturated_file = run_dir / f"{args.port}.saturated"
    state.metrics_file = run_dir / f"{args.port}.metrics"
    record = Record(
        run_dir / f"{args.port}.json",
        {
            "standin": "sglang",
            "version": __version__,
            "pid": os.getpid(),
            "executable": sys.executable,
            "argv": cli.mask_argv(argv),
            "config_file": parsed.config_path,
            "config_keys": parsed.config_keys,
            "settings": cli.settings_of(args),
            "api_key_set": bool(args.api_key),
            "api_key_from": parsed.api_key_from,
            "hf_token_set": bool(os.environ.get("HF_TOKEN")),
            "env": {
                name: value
                for name, value in sorted(os.environ.items())
                if name in RECORDED_ENV or name.startswith("NCCL_")
            },
            "state": "starting",
            "started_at": state.started,
            "ready_at": None,
            "stopped_at": None,
            "exit_code": None,
            "peers_joined": [],
        },
    )
    # As SGLang: its whole ServerArgs at start, secrets unmasked. Real SGLang runs
    # `logger.info(f"{server_args=}")` in _launch_subprocesses (sglang/srt/entrypoints/engine.py),
    # the dataclass's repr: "server_args=ServerArgs(model_path='...', ..., api_key='sk-...',
    # ...)"; newer releases log the resolved dict the same way ("server_args={...}"), key
    # included: sgl-project/sglang#37457, "Startup logs and server_info expose API keys in
    # resolved server arguments". So whoever shows this journal must mask it.
    shown = ", ".join(f"{name}={value!r}" for name, value in vars(args).items())
    log(f"server_args=ServerArgs({shown})")
    log(f"sglang {__version__} (test stand-in: no model is loaded)")

    if args.model_path.startswith("broken/"):
        return fail_loading(state, record)
    most = os.environ.get("SGLANG_STANDIN_MAX_MEM_FRACTION")
    if most and args.mem_fraction_static and args.mem_fraction_static > float(most):
        return fail_out_of_memory(state, record)
    if os.environ.get("HF_HUB_OFFLINE") == "1" and weights.is_hub_id(args.model_path):
        # As SGLang offline: the weights come from the local Hub cache, or nowhere.
        snapshot = weights.offline_snapshot(args.model_path, args.revision)
        if snapshot is None:
            log(f"Load weight begin (model {args.model_path}, revision {args.revision})")
            log(weights.OFFLINE_ERROR, sys.stderr)
            record.update(state="failed", exit_code=1, stopped_at=time.time())
            return 1
        record.update(snapshot=str(snapshot))

    if args.nnodes > 1 and not args.dist_init_addr:
        log("ValueError: --dist-init-addr is required when --nnodes > 1", sys.stderr)
        record.update(state="failed", exit_code=1, stopped_at=time.time())
        return 1
    if args.nnodes > 1 and args.node_rank > 0:
        # As SGLang's: ranks other than 0 run schedulers only, no HTTP server.
        conn = rendezvous_join(state)
        if conn is None:
            record.update(state="stopped", exit_code=0, stopped_at=time.time())
            return 0
        state.joined = True
        log(
            f"Node rank {args.node_rank} joined rank 0 at {args.dist_init_addr}; "
            "non-zero ranks serve no HTTP"
        )
        record.update(state="joined")
        code = await_rank0(state, conn)
        record.update(
            state="stopped" if code == 0 else "failed", exit_code=code, stopped_at=time.time()
        )
        return code

    try:
        listener = rendezvous_head(state) if args.nnodes > 1 else None
    except (OSError, ValueError) as error:
        log(
            f"RuntimeError: cannot listen at --dist-init-addr {args.dist_init_addr}: {error}",
            sys.stderr,
        )
        record.update(state="failed", exit_code=1, stopped_at=time.time())
        return 1
    # As real SGLang: nothing listens while the weights load, the KV cache is allocated and
    # CUDA graphs are captured (146 of the 158 s before ready on an H200); then /health answers
    # 503 until its own warm-up request passes (tests/fixtures/sglang-0.5.17-h200/tiny/
    # health-warmup.json). The stand-in spends SGLANG_STANDIN_LOAD_S of its warm-up unbound
    # (default: LOAD_SHARE of it, at most MAX_LOAD_S, so a long 503 phase stays testable).
    warmup = 0.0 if args.skip_server_warmup else env_seconds("SGLANG_STANDIN_WARMUP_S", 2.0)
    load = min(warmup, env_seconds("SGLANG_STANDIN_LOAD_S", min(warmup * LOAD_SHARE, MAX_LOAD_S)))
    if state.stop.wait(load):
        broadcast_shutdown(state)
        record.update(state="stopped", exit_code=0, stopped_at=time.time())
        return 0
    try:
        server = make_server(state)
    except OSError as error:
        reason = str(error.strerror or error).lower()
        log(
            f"ERROR:    [Errno {error.errno}] error while attempting to bind on address "
            f"({args.host!r}, {args.port}): {reason}",
            sys.stderr,
        )
        record.update(state="failed", exit_code=1, stopped_at=time.time())
        return 1
    state.schedulers = Schedulers(args.tp_size or 1)
    record.update(scheduler_pids=[p.pid for p in state.schedulers.processes])
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True
    ).start()
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print(
        f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)",
        flush=True,
    )
    record.update(state="warming_up")

    hang = args.model_path.startswith("hang/")
    deadline = state.started + warmup
    ready_file = os.environ.get("SGLANG_STANDIN_READY_FILE")
    while not state.stop.wait(0.05):
        held = ready_file is not None and not os.path.exists(ready_file)
        if hang or held or time.time() < deadline or len(state.peers) < args.nnodes - 1:
            continue
        if not state.schedulers.up():
            continue
        # The line first: whoever sees /health answer 200 finds it in the log already.
        log(READY_LINE)
        record.update(state="ready", ready_at=time.time(), peers_joined=sorted(state.peers))
        state.ready.set()
        threading.Thread(target=other_load, args=(state,), name="other-load", daemon=True).start()
        break
    state.stop.wait()

    # As SGLang's HTTP server: no new connections, the requests in flight finish, then the
    # schedulers are told to exit.
    server.shutdown()
    server.server_close()
    # Real 0.5.17's words (tests/fixtures/sglang-0.5.17-h200/tiny/server.log).
    log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    record.update(state="draining")
    while state.in_flight():
        time.sleep(0.05)
    log(
        f"Gracefully exiting... Remaining number of requests {state.in_flight()}. "
        "Remaining requests remaining_rids=[]."
    )
    broadcast_shutdown(state)
    state.schedulers.stop()
    if listener is not None:
        listener.close()
    record.update(state="stopped", exit_code=0, stopped_at=time.time())
    return 0
