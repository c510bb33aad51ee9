"""The Hub stand-in (tests/hosts/hubstandin.py) against the real huggingface_hub client: it
downloads a snapshot from it, resumes a cut-off file with a Range request, and raises the
client's own errors for a gated repository, a missing one and a missing revision. And the
controller's planner (pyinfra_sglang/model_files/model_snapshot.py) against the same server."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
from pathlib import Path

import pytest

from pyinfra_sglang.model_files.model_snapshot import ModelPlanError, hub_snapshot, needed_bytes
from tests.hosts.hubstandin import LFS_THRESHOLD, Hub, Repo, serve

huggingface_hub = pytest.importorskip("huggingface_hub")

REPO = "test-org/tiny-model"
GATED = "test-org/gated-model"
TOKEN = "hf_test_TOKEN_0123456789"
WEIGHTS = bytes(range(256)) * (LFS_THRESHOLD // 256 + 4096)  # an LFS file
FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "tokenizer.json": b'{"version": "1.0"}\n',
    "model.safetensors": WEIGHTS,
}
COMMIT = hashlib.sha1(b"tiny-model commit 1").hexdigest()


@pytest.fixture
def hub():
    repos = {
        REPO: Repo(commits={COMMIT: FILES}, refs={"main": COMMIT, "v1.0": COMMIT}),
        GATED: Repo(commits={COMMIT: FILES}, refs={"main": COMMIT}, gated_token=TOKEN),
    }
    hub = Hub(repos)
    with serve(hub) as endpoint:
        yield hub, endpoint


def download(endpoint, tmp_path, repo=REPO, revision=COMMIT, token=False):
    from huggingface_hub import snapshot_download

    return snapshot_download(
        repo_id=repo,
        revision=revision,
        cache_dir=str(tmp_path / "hub"),
        endpoint=endpoint,
        token=token,
    )


def test_the_real_client_downloads_a_snapshot_and_resumes_a_cut_file(hub, tmp_path):
    server, endpoint = hub
    folder = download(endpoint, tmp_path)
    assert folder.endswith(f"models--test-org--tiny-model/snapshots/{COMMIT}")
    for name, content in FILES.items():
        assert Path(folder, name).read_bytes() == content
    # The LFS file is stored under its sha256, as the Hub cache keys blobs by ETag.
    blob = tmp_path / "hub" / "models--test-org--tiny-model" / "blobs"
    assert (blob / hashlib.sha256(WEIGHTS).hexdigest()).stat().st_size == len(WEIGHTS)

    # Cut the weights off mid-file, as a killed download leaves them: the client resumes.
    again = tmp_path / "again"
    partial_blobs = again / "hub" / "models--test-org--tiny-model" / "blobs"
    partial_blobs.mkdir(parents=True)
    incomplete = partial_blobs / (hashlib.sha256(WEIGHTS).hexdigest() + ".incomplete")
    incomplete.write_bytes(WEIGHTS[:1000])
    server.requests.clear()
    download(endpoint, again)
    ranges = [r for method, path, r in server.requests if path.endswith("model.safetensors")]
    assert "bytes=1000-" in ranges
    assert (partial_blobs / hashlib.sha256(WEIGHTS).hexdigest()).read_bytes() == WEIGHTS


def test_the_real_client_raises_its_own_errors(hub, tmp_path):
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    _, endpoint = hub
    with pytest.raises(GatedRepoError):
        download(endpoint, tmp_path, repo=GATED)
    assert download(endpoint, tmp_path / "t", repo=GATED, token=TOKEN)
    with pytest.raises(RepositoryNotFoundError):
        download(endpoint, tmp_path, repo="test-org/absent")
    with pytest.raises(RevisionNotFoundError):
        download(endpoint, tmp_path, revision="no-such-branch")


def test_the_planner_reads_commit_and_sizes_and_says_what_went_wrong(hub):
    _, endpoint = hub
    snapshot = hub_snapshot(endpoint, REPO, "v1.0", None)  # a tag, resolved
    assert snapshot.commit == COMMIT and snapshot.revision == "v1.0"
    assert dict(snapshot.files) == {name: len(content) for name, content in FILES.items()}
    assert snapshot.missing_bytes({"config.json": len(FILES["config.json"])}) == (
        len(FILES["tokenizer.json"]) + len(WEIGHTS)
    )
    # A cut-off file counts what is left of it.
    cut = {**dict(snapshot.files), "model.safetensors": 1000}
    assert snapshot.missing_bytes(cut) == len(WEIGHTS) - 1000
    assert needed_bytes(0) == 0 and needed_bytes(10**9) == int(10**9 * 1.05 + 10e9)

    cases = [
        ((GATED, "main", None), "is gated; set hf_token_file"),
        ((GATED, "main", "hf_unknown"), "refuses the token in hf_token_file"),
        (("test-org/absent", "main", None), "no such repository, or it is private"),
        ((REPO, "no-such-branch", None), "the Hub has no such revision"),
    ]
    for args, expected in cases:
        with pytest.raises(ModelPlanError, match=expected) as caught:
            hub_snapshot(endpoint, *args)
        assert f"model {args[0]} at revision {args[1]}" in str(caught.value)
    assert hub_snapshot(endpoint, GATED, "main", TOKEN).commit == COMMIT


def test_an_unreachable_hub_is_named():
    with pytest.raises(ModelPlanError, match="cannot reach the Hub at http://127.0.0.1:9"):
        hub_snapshot("http://127.0.0.1:9", REPO, "main", None)


def test_the_host_download_program_logs_progress_and_completes(hub, tmp_path):
    # pyinfra_sglang/host_programs/model_download.py, run as the model role runs it (its own
    # process, HF_ENDPOINT in the environment), with the real huggingface_hub.
    import subprocess
    import sys

    from pyinfra_sglang.host_programs import program_path

    server, endpoint = hub
    server.throttle_bytes_per_s = 20 * 1024 * 1024  # ~0.6 s for the weights: progress lines
    log = tmp_path / "download.log"
    total = sum(len(content) for content in FILES.values())

    def run(commit):
        return subprocess.run(
            [
                sys.executable,
                str(program_path("model_download.py")),
                "--repo",
                REPO,
                "--commit",
                commit,
                "--cache-dir",
                str(tmp_path / "hub"),
                "--total-bytes",
                str(total),
                "--log",
                str(log),
                "--every",
                "0.1",
            ],
            capture_output=True,
            text=True,
            env={
                "HF_ENDPOINT": endpoint,
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "PATH": "/usr/bin:/bin",
            },
            timeout=120,
        )

    done = run(COMMIT)
    assert done.returncode == 0, done.stderr
    lines = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    user = pwd.getpwuid(os.getuid()).pw_name  # the log names who ran it
    assert lines[0] == f"downloading {REPO} at {COMMIT} into {tmp_path / 'hub'} as {user}"
    assert any(" GB, " in line and "MB/s, ETA " in line for line in lines[1:-1]), lines
    folder = tmp_path / "hub" / "models--test-org--tiny-model" / "snapshots" / COMMIT
    assert re.fullmatch(
        rf"complete: {total / 1e9:.1f} GB in {folder}; {total / 1e9:.1f} GB fetched in "
        r"0m0\ds, \d+ MB/s",
        lines[-1],
    ), lines[-1]

    failed = run("0" * 40)
    assert failed.returncode == 1
    assert (
        log.read_text()
        .splitlines()[-1]
        .split(" ", 1)[1]
        .startswith("failed: RevisionNotFoundError: ")
    )


def test_a_repository_throttle_slows_that_repository_only(hub):
    # The resume test on the hosts cuts a download off mid-file: it needs one repository's
    # files to arrive slowly while the others' stay fast.
    import time
    import urllib.request

    server, endpoint = hub
    server.repos[GATED].gated_token = None
    server.repos[REPO].throttle_bytes_per_s = 4 * 1024 * 1024  # ~2.6 s for the weights

    def seconds(repo: str) -> float:
        started = time.monotonic()
        url = f"{endpoint}/{repo}/resolve/{COMMIT}/model.safetensors"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == WEIGHTS
        return time.monotonic() - started

    assert seconds(REPO) >= len(WEIGHTS) / (4 * 1024 * 1024) * 0.9
    assert seconds(GATED) < 1.0


def test_the_token_does_not_follow_a_redirect_to_another_host():
    # urllib copies Authorization onto a redirect to any host; a mirror (hf_endpoint) that
    # redirects elsewhere must not hand that host the token. Same origin keeps it.
    import http.server
    import threading

    seen: dict[str, str | None] = {}
    body = json.dumps({"sha": "c" * 40, "siblings": [{"rfilename": "a", "size": 1}]}).encode()

    def serve(handler_do_get):
        handler = type("H", (http.server.BaseHTTPRequestHandler,), {"do_GET": handler_do_get})
        handler.log_message = lambda *a: None
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def elsewhere(self):
        seen[self.path.split("?")[0]] = self.headers.get("Authorization")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    other = serve(elsewhere)

    def mirror(self):
        if self.path.startswith("/api/models/org/same"):
            seen["mirror"] = self.headers.get("Authorization")
            if "again" not in self.path:
                target = self.path.replace("/same/", "/same-again/")
                self.send_response(302)
                self.send_header("Location", target)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(302)
        self.send_header("Location", f"http://127.0.0.1:{other.server_port}{self.path}")
        self.end_headers()

    home = serve(mirror)
    try:
        endpoint = f"http://127.0.0.1:{home.server_port}"
        token = "hf_RedirectTokenValue0123456789abcdef"
        assert hub_snapshot(endpoint, "org/away", "main", token).commit == "c" * 40
        assert seen["/api/models/org/away/revision/main"] is None
        assert hub_snapshot(endpoint, "org/same", "main", token).commit == "c" * 40
        assert seen["mirror"] == f"Bearer {token}"
    finally:
        home.shutdown()
        other.shutdown()


def test_the_uplink_is_one_pipe_that_downloads_at_once_share():
    import time
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    rate = 8 * LFS_THRESHOLD  # bytes a second: one weights file in about an eighth of one
    hub = Hub({REPO: Repo(commits={COMMIT: FILES}, refs={"main": COMMIT})}, uplink_bytes_per_s=rate)
    with serve(hub) as endpoint:
        url = f"{endpoint}/{REPO}/resolve/{COMMIT}/model.safetensors"

        def fetch(_):
            with urllib.request.urlopen(url, timeout=30) as answer:
                return len(answer.read())

        start = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            sizes = list(pool.map(fetch, range(4)))
        took = time.monotonic() - start
    assert sizes == [len(WEIGHTS)] * 4
    # Four bodies through one pipe: at least their sum over its rate, not one body's.
    assert took >= 0.95 * 4 * len(WEIGHTS) / rate, took
