"""Take a worker out of SGLang's router, or put it back, through the router's worker API.

Run on the router's host by a rolling driver upgrade (roles/driver_rollout.py):
``python3 router_workers.py ROUTER_URL {list,remove,add} [WORKER_URL] [--env-file F]``.
The gateway's REST API (docs/sources.md, "SGLang's router: its workers"): ``GET /workers``
lists them, ``POST /workers`` with ``{"url": ...}`` queues an add, ``DELETE
/workers/{id}`` queues a removal (the releases that give no id take the URL-encoded URL).
Both are queued (202): this waits, bounded by ``--timeout``, until ``GET /workers`` shows the
change, and prints one JSON line: {"ok", "present", "healthy", "workers", "error"}.

With a key the router's workers API asks for ``Authorization: Bearer KEY`` too: the key is
read from the router's 0600 environment file (``--env-file``, its SGLANG_ROUTER_API_KEY
line), never from a command line. Standard library only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import quote

KEY_VARIABLE = "SGLANG_ROUTER_API_KEY"
ANSWER_LIMIT = 4 * 1024 * 1024


def read_key(path: str | None) -> str | None:
    """The router's API key from its environment file (KEY=value lines), None without one."""
    if not path:
        return None
    with open(path, encoding="utf-8") as file:
        for line in file:
            name, _, value = line.strip().partition("=")
            if name == KEY_VARIABLE:
                return value.strip().strip('"').strip("'") or None
    return None


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


class Router:
    def __init__(self, url: str, key: str | None, timeout: float):
        self.url, self.key, self.timeout = url.rstrip("/"), key, timeout

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, text = response.status, response.read(ANSWER_LIMIT)
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read(ANSWER_LIMIT)
        try:
            return status, json.loads(text or b"null")
        except ValueError:
            return status, None

    def workers(self) -> list[dict]:
        status, answer = self.call("GET", "/workers")
        if status != 200 or not isinstance(answer, dict):
            raise OSError(f"GET /workers answered {status}")
        listed = answer.get("workers")
        if not isinstance(listed, list):
            raise OSError("GET /workers: no list of workers in the answer")
        return [w for w in listed if isinstance(w, dict) and isinstance(w.get("url"), str)]

    def find(self, worker: str) -> dict | None:
        return next((w for w in self.workers() if same_url(w["url"], worker)), None)


def healthy(entry: dict | None) -> bool:
    # smg and the SGLang docs call it is_healthy; older gateways healthy.
    if entry is None:
        return False
    return bool(entry.get("is_healthy", entry.get("healthy", False)))


def change(router: Router, action: str, worker: str, deadline: float) -> str | None:
    """Ask for the change; None once GET /workers shows it, else why not."""
    entry = router.find(worker)
    if action == "remove" and entry is not None:
        ident = entry.get("id") or entry["url"]
        status, _ = router.call("DELETE", "/workers/" + quote(str(ident), safe=""))
        if status not in (200, 202, 204):
            return f"DELETE /workers answered {status}"
    if action == "add" and entry is None:
        status, _ = router.call("POST", "/workers", {"url": worker})
        if status not in (200, 201, 202):
            return f"POST /workers answered {status}"
    while True:
        entry = router.find(worker)
        done = entry is None if action == "remove" else healthy(entry)
        if done:
            return None
        if time.monotonic() >= deadline:
            state = "still listed" if action == "remove" else "not listed healthy"
            return f"{worker} {state} by the router after the wait"
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("router")
    parser.add_argument("action", choices=("list", "remove", "add"))
    parser.add_argument("worker", nargs="?")
    parser.add_argument("--env-file")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.action != "list" and not args.worker:
        parser.error(f"{args.action} needs the worker's URL")
    deadline = time.monotonic() + args.timeout
    result: dict = {"ok": False, "present": None, "healthy": None, "workers": None, "error": None}
    try:
        router = Router(args.router, read_key(args.env_file), min(args.timeout, 30.0))
        if args.action != "list":
            result["error"] = change(router, args.action, args.worker, deadline)
        listed = router.workers()
        result["workers"] = [w["url"] for w in listed]
        if args.worker:
            entry = next((w for w in listed if same_url(w["url"], args.worker)), None)
            result["present"], result["healthy"] = entry is not None, healthy(entry)
        result["ok"] = result["error"] is None
    except (OSError, ValueError) as error:
        result["error"] = f"router {args.router}: {error}"
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
