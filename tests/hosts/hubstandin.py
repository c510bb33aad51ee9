"""A stand-in for the Hugging Face Hub: the HTTP API the real huggingface_hub client uses to
download a model, served on a local address, for repositories the tests make.

What it answers, as the Hub does (huggingface_hub's hf_api.py, file_download.py and
utils/_http.py read these; the client's errors come from the X-Error-Code header):

- ``GET /api/models/<repo>[/revision/<rev>]`` (``?blobs=true``): the model's info: ``sha``
  (the commit) and ``siblings`` with ``rfilename`` and, with blobs, ``size`` and ``lfs``.
- ``GET /api/models/<repo>/tree/<rev>[/<path>]?recursive=true``: the files at a revision.
- ``HEAD|GET /<repo>/resolve/<rev>/<path>``: the file, with ``X-Repo-Commit``, ``ETag`` (the
  sha256 of an LFS file, the git blob id of a small one), ``Content-Length``,
  ``Accept-Ranges: bytes``; ``Range: bytes=N-`` gets 206 and the rest (a resumed download).
- Errors: an unknown repository 401 ``RepoNotFound`` (the Hub hides whether a repository it
  will not show exists), an unknown revision 404 ``RevisionNotFound``, a file not at that
  revision 404 ``EntryNotFound``, a gated repository without the right token 401
  ``GatedRepo``; a token it does not know 401 "Invalid credentials in Authorization header".

Revisions are commits (40 hex digits) or branch names (``refs``). Files at or above
``LFS_THRESHOLD`` bytes are LFS files. ``throttle_bytes_per_s`` slows file bodies, of every
repository (``Hub``) or of one (``Repo``, over the Hub's): for progress tests, and for resume
tests that cut a download off while a file is partly written. ``uplink_bytes_per_s`` is one
pipe all file bodies share, whatever the connections (a site's uplink to the Hub: N hosts
fetching at once each get 1/N of it), for timings of fetching once a site. Every request is
kept in
``Hub.requests`` as (method, path, Range header), for tests to read (a resumed file is a GET
with ``Range: bytes=N-``, N > 0).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores large files through LFS (ETag = sha256)
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]]  # commit sha -> {path: content}
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    gated_token: str | None = None  # gated: only this token gets in
    throttle_bytes_per_s: int | None = None  # this repository's file bodies, over the Hub's
    # Sizes the file list gives for files no test downloads (a 65 GB checkpoint's shards),
    # over their contents' lengths: what planning reads of a real model's weights.
    listed_sizes: dict[str, int] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


def blob_id(content: bytes) -> str:
    """The git blob id (what the Hub reports as a small file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def file_entry(path: str, content: bytes) -> dict:
    entry = {"type": "file", "oid": blob_id(content), "size": len(content), "path": path}
    if len(content) >= LFS_THRESHOLD:
        digest = hashlib.sha256(content).hexdigest()
        entry["lfs"] = {"oid": digest, "size": len(content), "pointerSize": 134}
    return entry


class Uplink:
    """One pipe of ``bytes_per_s`` that every body shares: each chunk waits until the bytes
    before it, of any connection, have gone through."""

    def __init__(self, bytes_per_s: int):
        self.bytes_per_s = bytes_per_s
        self._lock = threading.Lock()
        self._free_at = 0.0

    def send(self, count: int) -> None:
        with self._lock:
            start = max(time.monotonic(), self._free_at)
            self._free_at = start + count / self.bytes_per_s
            done = self._free_at
        time.sleep(max(0.0, done - time.monotonic()))


class Hub:
    """The repositories served, and what the server saw (for tests to read)."""

    def __init__(
        self,
        repos: dict[str, Repo],
        throttle_bytes_per_s: int | None = None,
        tokens: tuple[str, ...] = (),
        uplink_bytes_per_s: int | None = None,
    ):
        self.repos = repos
        self.throttle_bytes_per_s = throttle_bytes_per_s
        self.uplink = Uplink(uplink_bytes_per_s) if uplink_bytes_per_s else None
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        # Tokens of accounts it knows (a gated repository's token is one): others get 401.
        self.known_tokens = {r.gated_token for r in repos.values() if r.gated_token} | set(tokens)


class Handler(http.server.BaseHTTPRequestHandler):
    hub: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet: tests read hub.requests instead
        pass

    def _error(self, status: int, code: str | None, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _repo(self, repo_id: str) -> Repo | None:
        """The repository if this request may see it; else the error is sent."""
        repo = self.hub.repos.get(repo_id)
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        if token and token not in self.hub.known_tokens:
            self._error(401, None, "Invalid credentials in Authorization header")
            return None
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated_token and token != repo.gated_token:
            self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted.")
            return None
        return repo

    def _commit(self, repo: Repo, revision: str) -> str | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        query = urllib.parse.parse_qs(url.query)
        api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(?:/(.*))?)?$", path)
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if api:
            repo_id, kind, revision, sub = api.groups()
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = self._commit(repo, urllib.parse.unquote(revision or "main"))
            if commit is None:
                return
            files = repo.commits[commit]
            if kind == "tree":
                prefix = (sub or "").strip("/")
                self._json(
                    [
                        file_entry(name, content)
                        for name, content in sorted(files.items())
                        if not prefix or name.startswith(prefix + "/")
                    ]
                )
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for name, content in sorted(files.items()):
                sibling = {"rfilename": name}
                if blobs:
                    entry = file_entry(name, content)
                    entry["size"] = repo.listed_sizes.get(name, entry["size"])
                    sibling.update({"size": entry["size"], "blobId": entry["oid"]})
                    if "lfs" in entry:
                        sibling["lfs"] = {
                            "sha256": entry["lfs"]["oid"],
                            "size": entry["size"],
                            "pointerSize": 134,
                        }
                siblings.append(sibling)
            self._json(
                {
                    "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": commit,
                    "private": False,
                    "gated": "manual" if repo.gated_token else False,
                    "disabled": False,
                    "siblings": siblings,
                }
            )
            return
        if resolve:
            repo_id, revision, name = resolve.groups()
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = self._commit(repo, revision)
            if commit is None:
                return
            content = repo.commits[commit].get(name)
            if content is None:
                self._error(404, "EntryNotFound", f"{name} does not exist at {revision}")
                return
            self._file(commit, content, repo.throttle_bytes_per_s or self.hub.throttle_bytes_per_s)
            return
        self._error(404, None, "Not Found")

    def _file(self, commit: str, content: bytes, rate: int | None) -> None:
        entry = file_entry("", content)
        etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
        start = 0
        ranged = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
        if ranged:
            start = min(int(ranged.group(1)), len(content))
        self.send_response(206 if ranged else 200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(content) - start))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        chunk = 256 * 1024
        for offset in range(start, len(content), chunk):
            if self.hub.uplink:
                self.hub.uplink.send(min(chunk, len(content) - offset))
            try:
                self.wfile.write(content[offset : offset + chunk])
            except (BrokenPipeError, ConnectionResetError):
                return
            if rate:
                time.sleep(chunk / rate)


@contextmanager
def serve(hub: Hub, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``hub`` on ``host`` (a free port); yields its endpoint URL."""
    handler = type("HubHandler", (Handler,), {"hub": hub})
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
