"""``python -m sglang_router.launch_router``: the stand-in SGLang Model Gateway.

A ThreadingHTTPServer, standard library only, in front of SGLang servers (--worker-urls):
requests other than its own endpoints go to the workers in turn (round robin whatever
--policy says), streamed answers relayed line by line. Retries as the real router's
RetryExecutor (sgl-router/src/core/retry.rs; defaults from sglang-router 0.3.2's
router_args.py): a refused connection or an answer of 408, 429, 500, 502, 503 or 504 is tried
again on the next worker, after 50 ms x 1.5^n (capped at 30 s), at most
--retry-max-retries attempts in all (5); the last answer is passed on. Its own endpoints:
GET /health and /readiness (200 when at least one worker's /health answers 200, else 503),
/liveness (200), /workers (each worker, healthy or not). SIGTERM or SIGINT stop it (exit 0).
The worker API of the gateway's docs (sgl-project/sglang docs/advanced_features/
sgl_model_gateway.md, "Worker Management APIs"): GET /workers lists each worker with its
``id``, ``url`` and ``is_healthy``; POST /workers ``{"url": ...}`` adds one and DELETE
/workers/{id} removes one (the id, or the URL-encoded URL), both answering 202 as the real
ones queue the job; a removed worker gets no new request, and those it runs finish.
It records its pid and argv to $SGLANG_STANDIN_RUN_DIR/router-<port>.json (default folder
/run/sglang-standin).

As the real router (sglang-router 0.3.2, sglang_router/router_args.py and the auth middleware
of sgl-project/sglang #10826):
- ``--host`` defaults to 0.0.0.0, and a second listener serves Prometheus metrics (GET
  /metrics) on ``--prometheus-host`` (default 0.0.0.0) : ``--prometheus-port`` (29000).
- With ``--api-key KEY`` every route but the health ones (/health, /health_generate,
  /liveness, /readiness) answers 401 unless the request carries ``Authorization: Bearer
  KEY``, and the router presents that key to the workers (they inherit the router's key).
  The key is read from the command line only (``main()`` parses ``sys.argv[1:]``).
- ``--shutdown-grace-period-secs`` (180; 0.3.0 and later, and every smg release): on SIGTERM
  the stand-in stops accepting and waits that long at most for the requests in flight.
- /metrics serves one family, ``smg_router_requests_total``, with the real one's name and
  labels (router_type, backend_type, connection_mode, model, endpoint, streaming), counted as
  the real HTTP router counts it: once per request to a generation route, when the route's
  handler takes it (after the key check and the payload limit, before any retry); model is
  the body's "model" ("default" without one), endpoint from the route (chat, generate,
  completions, rerank, responses; others "other"). Source: sglang-router 0.3.2's release
  commit c7f9bf9f563cbb652b17942dd6d91a29511034a3 ("[smg] release 0.3.2 (#17168)", history of
  github.com/lightseekorg/smg, whose tree is sgl-project/sglang's sgl-model-gateway/):
  src/observability/metrics.rs (init_metrics, record_router_request),
  src/routers/http/router.rs (route_typed_request: ``model_id.unwrap_or("default")``) and
  src/routers/grpc/utils.rs (route_to_endpoint). The same name and labels at smg v1.1.0,
  v1.4.0 and v1.9.0 (github.com/smg-project/smg, model_gateway/src/observability/metrics.rs);
  smg 1.13.0's source is not in the stored snapshots (newest read: smg-project/smg
  f8daa8835a8b4419b53125a837aaab2b3ce895c3, 2026-08-22, after v1.9.0). Before 0.3.0 the
  names were sgl_router_* (sgl_router_requests_total{route}, sgl_router_active_workers; 0.2.2
  to 0.2.4, src/metrics.rs), which no stand-in version here is. The real router's other
  families (smg_http_*, smg_worker_*, histograms...) are not served; the tests read only this
  one (tests/unit/test_sglang_standin.py, and b"requests_total" in
  tests/integration/test_router_key.py).

The same file is the smg stand-in's ``smg/launch_router.py`` (tests/hosts/pyindex.py copies
it there; smg 1.x keeps sglang-router's flags, smg/router_args.py): it names itself after the
package it was imported from, and ``smg launch ARGS`` (smg/cli.py) calls ``main(ARGS)``.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .version import __version__

# The project this copy stands in for: sglang-router, or smg (the same file in its package).
PROJECT = "smg" if __package__ == "smg" else "sglang-router"
PROG = "smg launch" if PROJECT == "smg" else "python -m sglang_router.launch_router"
MASK = "********"
DEFAULT_RUN_DIR = "/run/sglang-standin"
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
FORWARDED_REQUEST_HEADERS = ("Content-Type", "Authorization", "Accept")
OWN_PATHS = ("/health", "/readiness", "/liveness", "/workers")
# The generation routes the real HTTP router counts in smg_router_requests_total, and their
# endpoint label (route_to_endpoint; /v1/embeddings and /v1/classify are "other").
ROUTED_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/generate": "generate",
    "/v1/completions": "completions",
    "/v1/rerank": "rerank",
    "/v1/responses": "responses",
    "/v1/embeddings": "other",
    "/v1/classify": "other",
}
# Routes open without the API key: the health ones (load balancers and systemd checks poll them).
PUBLIC_PATHS = ("/health", "/health_generate", "/liveness", "/readiness")


def log(message: str, stream=None) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} INFO {__package__}: {message}", file=stream or sys.stdout, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=f"SGLang Model Gateway {__version__} (test stand-in)",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--worker-urls", nargs="*", default=[], help="SGLang servers to route to")
    add("--policy", choices=POLICIES, default="cache_aware")
    add("--host", default="0.0.0.0")
    add("--port", type=int, default=30000)
    add("--api-key")
    add("--log-level", default="info")
    add("--log-dir")
    add("--request-timeout-secs", type=int, default=1800)
    add("--worker-startup-timeout-secs", type=int, default=600)
    add("--worker-startup-check-interval", type=int, default=30)
    add("--health-check-interval-secs", type=int, default=60)
    add("--health-check-timeout-secs", type=int, default=5)
    add("--health-failure-threshold", type=int, default=3)
    add("--health-success-threshold", type=int, default=2)
    add("--health-check-endpoint", default="/health")
    add("--cache-threshold", type=float, default=0.3)
    add("--balance-abs-threshold", type=int, default=64)
    add("--balance-rel-threshold", type=float, default=1.5)
    add("--eviction-interval-secs", type=int, default=120)
    add("--max-tree-size", type=int, default=2**26)
    add("--max-payload-size", type=int, default=512 * 1024 * 1024)
    add("--retry-max-retries", type=int, default=5)
    add("--retry-initial-backoff-ms", type=int, default=50)
    add("--retry-max-backoff-ms", type=int, default=30_000)
    add("--retry-backoff-multiplier", type=float, default=1.5)
    add("--disable-retries", action="store_true")
    add("--prometheus-host", default="0.0.0.0")
    add("--prometheus-port", type=int, default=29000)
    add("--shutdown-grace-period-secs", type=int, default=180)
    return parser


# The statuses sgl-router retries (sgl-router/src/core/retry.rs, execute_response_with_retry).
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def mask_argv(argv: list[str]) -> list[str]:
    masked, hide_next = [], False
    for word in argv:
        if hide_next:
            masked.append(MASK)
            hide_next = False
        elif word == "--api-key":
            masked.append(word)
            hide_next = True
        elif word.startswith("--api-key="):
            masked.append("--api-key=" + MASK)
        else:
            masked.append(word)
    return masked


class Worker:
    def __init__(self, url: str):
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.requests_total = 0
        self.id = str(uuid.uuid4())

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=timeout)

    def healthy(self, endpoint: str, timeout: float) -> bool:
        try:
            conn = self.connection(timeout)
            try:
                conn.request("GET", self.prefix + endpoint)
                response = conn.getresponse()
                response.read()
                return response.status == 200
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            return False


class Router:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.workers = [Worker(url) for url in args.worker_urls]
        self.lock = threading.Lock()
        self.turn = 0
        # smg_router_requests_total: (model, endpoint, streaming) -> count
        self.routed: dict[tuple[str, str, str], int] = {}
        self.in_flight = 0  # requests being proxied, for the shutdown grace
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(self.workers))))

    def listed(self) -> list[Worker]:
        with self.lock:
            return list(self.workers)

    def health(self, workers: list[Worker] | None = None) -> list[bool]:
        timeout = min(float(self.args.health_check_timeout_secs), 5.0)
        endpoint = self.args.health_check_endpoint
        workers = self.listed() if workers is None else workers
        return list(self.pool.map(lambda w: w.healthy(endpoint, timeout), workers))

    def in_turn(self) -> list[Worker]:
        """All workers, starting with the next one's turn."""
        with self.lock:
            workers = list(self.workers)
            start = self.turn % max(1, len(workers))
            self.turn = (start + 1) % max(1, len(workers))
        return workers[start:] + workers[:start]

    def add(self, url: str) -> Worker:
        worker = Worker(url)
        with self.lock:
            found = next((w for w in self.workers if w.url == worker.url), None)
            if found is None:
                self.workers.append(worker)
        return found or worker

    def remove(self, ident: str) -> bool:
        ident = unquote(ident).rstrip("/")
        with self.lock:
            kept = [w for w in self.workers if ident not in (w.id, w.url)]
            removed = len(kept) != len(self.workers)
            self.workers = kept
        return removed


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = PROJECT
    sys_version = ""
    router: Router

    def log_message(self, format, *args):
        pass

    def send_json(self, status: int, value) -> None:
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def own(self, path: str) -> None:
        router = self.router
        if path == "/liveness":
            return self.send_json(200, {"status": "alive"})
        listed = router.listed()
        health = router.health(listed)
        if path == "/workers":
            workers = [
                {
                    "id": w.id,
                    "url": w.url,
                    "is_healthy": ok,
                    "healthy": ok,
                    "requests_total": w.requests_total,
                }
                for w, ok in zip(listed, health)
            ]
            return self.send_json(
                200, {"workers": workers, "total": len(workers), "healthy": sum(health)}
            )
        counts = {"healthy_workers": sum(health), "total_workers": len(health)}
        if any(health):
            return self.send_json(200, {"status": "ready", **counts})
        return self.send_json(
            503, {"status": "not_ready", **counts, "reason": "No healthy workers available"}
        )

    def authorized(self) -> bool:
        """True when the router has no key, the route is public, or the request carries
        ``Authorization: Bearer KEY``; else answers 401 and returns False."""
        key = self.router.args.api_key
        if not key or urlsplit(self.path).path in PUBLIC_PATHS:
            return True
        given = self.headers.get("Authorization") or ""
        if given.startswith("Bearer ") and hmac.compare_digest(given[7:], key):
            return True
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self):
        path = urlsplit(self.path).path
        if not self.authorized():
            return
        if path in OWN_PATHS:
            return self.own(path)
        self.proxy(b"")

    def do_HEAD(self):
        self.do_GET()

    def do_DELETE(self):
        if not self.authorized():
            return
        path = urlsplit(self.path).path
        if not path.startswith("/workers/"):
            return self.send_json(404, {"error": "not found"})
        if not self.router.remove(path[len("/workers/") :]):
            return self.send_json(404, {"error": "worker not found"})
        return self.send_json(202, {"status": "accepted"})

    def add_worker(self, body: bytes) -> None:
        try:
            fields = json.loads(body or b"{}")
            worker = self.router.add(str(fields["url"]))
        except (ValueError, KeyError, TypeError) as error:
            return self.send_json(400, {"error": f"bad worker: {error}"})
        return self.send_json(202, {"status": "accepted", "worker_id": worker.id})

    def do_POST(self):
        if not self.authorized():
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.router.args.max_payload_size:
            self.close_connection = True
            return self.send_json(413, {"error": "Payload too large"})
        body = self.rfile.read(length)
        if urlsplit(self.path).path == "/workers":
            return self.add_worker(body)
        self.count_routed(body)
        with self.router.lock:
            self.router.in_flight += 1
        try:
            self.proxy(body)
        finally:
            with self.router.lock:
                self.router.in_flight -= 1

    def count_routed(self, body: bytes) -> None:
        """smg_router_requests_total, as the real router's handlers count it: a generation
        route's request whose body parses (the real one rejects others before routing)."""
        endpoint = ROUTED_ENDPOINTS.get(urlsplit(self.path).path)
        if endpoint is None:
            return
        try:
            fields = json.loads(body or b"{}")
        except ValueError:
            return
        if not isinstance(fields, dict):
            return
        model = fields.get("model") or "default"
        key = (str(model), endpoint, "true" if fields.get("stream") else "false")
        with self.router.lock:
            self.router.routed[key] = self.router.routed.get(key, 0) + 1

    def proxy(self, body: bytes) -> None:
        router = self.router
        headers = {
            name: self.headers[name] for name in FORWARDED_REQUEST_HEADERS if self.headers.get(name)
        }
        if router.args.api_key:
            # Workers given on the command line inherit the router's key.
            headers["Authorization"] = f"Bearer {router.args.api_key}"
        args = router.args
        attempts = 1 if args.disable_retries else max(1, args.retry_max_retries)
        for attempt in range(attempts):
            if attempt:
                delay_ms = args.retry_initial_backoff_ms * args.retry_backoff_multiplier ** (
                    attempt - 1
                )
                time.sleep(min(delay_ms, args.retry_max_backoff_ms) / 1000)
            turn = router.in_turn()
            if not turn:
                break  # every worker removed
            worker = turn[0]
            conn = worker.connection(5.0)  # to connect; the answer may take much longer
            try:
                conn.connect()
                conn.sock.settimeout(float(args.request_timeout_secs))
                conn.request(
                    self.command, worker.prefix + self.path, body=body or None, headers=headers
                )
                response = conn.getresponse()
            except (OSError, http.client.HTTPException):
                conn.close()
                continue  # refused or dropped: retried
            worker.requests_total += 1
            if response.status in RETRYABLE_STATUSES and attempt + 1 < attempts:
                response.read()
                conn.close()
                continue
            try:
                self.relay(response)
            finally:
                conn.close()
            return
        self.send_json(503, {"error": "No available workers"})

    def relay(self, response: http.client.HTTPResponse) -> None:
        content_type = response.getheader("Content-Type", "application/json")
        streamed = response.getheader(
            "Transfer-Encoding", ""
        ).lower() == "chunked" or content_type.startswith("text/event-stream")
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        if not streamed:
            data = response.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                line = response.readline()
                if not line:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # the worker went away mid-stream


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


class MetricsHandler(BaseHTTPRequestHandler):
    """The Prometheus listener: GET /metrics, nothing else; no key asked (as the real one)."""

    protocol_version = "HTTP/1.1"
    router: Router

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        if urlsplit(self.path).path != "/metrics":
            body, status = b"not found\n", 404
        else:
            router = self.router
            with router.lock:
                routed = sorted(router.routed.items())
            lines = ["# TYPE smg_router_requests_total counter"]
            for (model, endpoint, streaming), count in routed:
                model = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
                lines.append(
                    'smg_router_requests_total{router_type="http",backend_type="regular",'
                    f'connection_mode="http",model="{model}",endpoint="{endpoint}",'
                    f'streaming="{streaming}"}} {count}'
                )
            body, status = ("\n".join(lines) + "\n").encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def server_for(host: str, port: int, handler) -> Server:
    kind = type("Listener", (Server,), {})
    kind.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return kind((host, port), handler)


def write_record(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(partial, path)
    except OSError as error:
        log(f"cannot write {path}: {error}", sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        router = Router(args)
    except ValueError as error:
        parser.error(f"--worker-urls: {error}")
    stop = threading.Event()

    def on_signal(signum, frame):
        # A thread sets the event: this handler may interrupt Event.wait holding its lock.
        threading.Thread(target=stop.set, name="signal", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    record_path = Path(os.environ.get("SGLANG_STANDIN_RUN_DIR") or DEFAULT_RUN_DIR)
    record_path = record_path / f"router-{args.port}.json"
    record = {
        "standin": PROJECT,
        "version": __version__,
        "pid": os.getpid(),
        "executable": sys.executable,
        "argv": mask_argv(argv),
        "worker_urls": [w.url for w in router.workers],
        "policy": args.policy,
        "host": args.host,
        "port": args.port,
        "api_key_set": bool(args.api_key),
        "prometheus_host": args.prometheus_host,
        "prometheus_port": args.prometheus_port,
        "shutdown_grace_period_secs": args.shutdown_grace_period_secs,
        "state": "starting",
        "started_at": time.time(),
        "stopped_at": None,
        "exit_code": None,
    }
    write_record(record_path, record)

    handler = type("RouterHandler", (Handler,), {"router": router})
    try:
        server = server_for(args.host, args.port, handler)
    except OSError as error:
        log(f"failed to bind {args.host}:{args.port}: {error.strerror}", sys.stderr)
        write_record(record_path, {**record, "state": "failed", "exit_code": 1})
        return 1
    metrics = None
    try:
        metrics_handler = type("RouterMetricsHandler", (MetricsHandler,), {"router": router})
        metrics = server_for(args.prometheus_host, args.prometheus_port, metrics_handler)
    except OSError as error:
        # The stand-in logs it and serves on without metrics.
        log(
            f"failed to start Prometheus metrics on {args.prometheus_host}:"
            f"{args.prometheus_port}: {error.strerror}",
            sys.stderr,
        )
    for listener, name in ((server, "http"), (metrics, "metrics")):
        if listener is not None:
            threading.Thread(
                target=listener.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=name,
                daemon=True,
            ).start()
    log(
        f"Starting router on {args.host}:{args.port} | policy: {args.policy} | "
        f"workers: {[w.url for w in router.workers]} ({PROJECT} {__version__}, "
        "test stand-in: round robin)"
    )
    record["state"] = "serving"
    write_record(record_path, record)
    while not stop.wait(0.2):
        pass
    log("Received a stop signal; shutting down")
    for listener in (server, metrics):
        if listener is not None:
            listener.shutdown()
            listener.server_close()
    # The requests in flight get up to the grace period, then the process exits anyway.
    grace_ends = time.monotonic() + args.shutdown_grace_period_secs
    while router.in_flight and time.monotonic() < grace_ends:
        time.sleep(0.05)
    router.pool.shutdown(wait=False)
    write_record(
        record_path, {**record, "state": "stopped", "exit_code": 0, "stopped_at": time.time()}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
