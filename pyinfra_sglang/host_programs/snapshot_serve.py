"""Serve one model snapshot of a host's Hugging Face Hub cache to the other hosts of its site,
read-only, for as long as they copy it (roles/model.py, model_fetch_once).

``python3 snapshot_serve.py --bind ADDR --port N --snapshot DIR`` with SNAPSHOT_TOKEN in the
environment (systemd's EnvironmentFile, root-only): GET ``/<token>/<file>`` answers the
file of the snapshot folder (a symlink into the cache's blobs/, which must stay inside the
model's cache folder); anything else, 404. The token keeps the files to the hosts the
deploy gave it to; the server binds to the one address given. Standard library only.
"""

from __future__ import annotations

import argparse
import hmac
import os
import shutil
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHUNK = 1024 * 1024


def resolve(snapshot: Path, relative: str) -> Path | None:
    """The file ``relative`` names in the snapshot, or None: no parent steps, no absolute
    path, and its real path inside the model's cache folder (snapshots/<commit>/.. /..)."""
    parts = Path(relative).parts
    if not parts or relative.startswith("/") or any(p in ("..", ".", "") for p in parts):
        return None
    model_folder = snapshot.parent.parent.resolve()
    path = (snapshot / relative).resolve()
    if model_folder not in path.parents or not path.is_file():
        return None
    return path


def handler_for(snapshot: Path, token: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "pyinfra-sglang-snapshot"
        sys_version = ""

        def log_message(self, format, *args):
            pass

        def do_GET(self):
            given, _, relative = unquote(urlsplit(self.path).path).lstrip("/").partition("/")
            path = resolve(snapshot, relative) if hmac.compare_digest(given, token) else None
            if path is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            with path.open("rb") as source:
                shutil.copyfileobj(source, self.wfile, CHUNK)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--snapshot", required=True)
    args = parser.parse_args(argv)
    token = os.environ.pop("SNAPSHOT_TOKEN", "")
    if len(token) < 32:
        print("SNAPSHOT_TOKEN missing or too short", file=sys.stderr)
        return 2
    kind = type("Server", (ThreadingHTTPServer,), {"daemon_threads": True})
    if ":" in args.bind:
        import socket

        kind.address_family = socket.AF_INET6
    server = kind((args.bind, args.port), handler_for(Path(args.snapshot), token))
    print(f"serving {args.snapshot} on {args.bind}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
