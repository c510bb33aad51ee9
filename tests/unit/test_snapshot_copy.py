"""The site's snapshot copy without hosts: snapshot_serve.py serving a Hub cache laid out as
huggingface_hub leaves it, snapshot_fetch.py copying it into another, each file checked
against the manifest (size and blob id), and what either refuses (pyinfra_sglang/
host_programs)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).resolve().parents[2] / "pyinfra_sglang" / "host_programs"
REPO, COMMIT = "org/model", "c" * 40
TOKEN = "t" * 43
FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "nested/tokenizer.json": b"{}" * 100,
    "model.safetensors": os.urandom(3 * 1024 * 1024 + 17),
}
LFS = {"model.safetensors"}


def blob_id(path: str, content: bytes) -> str:
    if path in LFS:
        return hashlib.sha256(content).hexdigest()
    return hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()


def hub_cache(root: Path) -> Path:
    """A cache as huggingface_hub writes it: blobs named by id, the snapshot's links."""
    folder = root / f"models--{REPO.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True)
    for path, content in FILES.items():
        blob = blob_id(path, content)
        (folder / "blobs" / blob).write_bytes(content)
        link = folder / "snapshots" / COMMIT / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("../" * (len(Path(path).parts) + 1) + f"blobs/{blob}")
    return folder / "snapshots" / COMMIT


def manifest_for(files: dict[str, bytes]) -> dict:
    entries = [
        {"path": p, "size": len(c), "etag": blob_id(p, c), "lfs": p in LFS}
        for p, c in sorted(files.items())
    ]
    return {"repo": REPO, "commit": COMMIT, "files": entries}


@pytest.fixture
def served(tmp_path):
    snapshot = hub_cache(tmp_path / "seed")
    (tmp_path / "outside").write_text("not the model's")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "SNAPSHOT_TOKEN": TOKEN}
    server = subprocess.Popen(
        [
            sys.executable,
            str(PROGRAMS / "snapshot_serve.py"),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--snapshot",
            str(snapshot),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    server.stdout.readline()  # "serving ...": it listens
    yield f"http://127.0.0.1:{port}", snapshot
    server.terminate()
    server.wait(10)


def fetch(tmp_path: Path, url: str, manifest: dict) -> tuple[int, str, Path]:
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cache, log = tmp_path / "peer", tmp_path / "fetch.log"
    done = subprocess.run(
        [
            sys.executable,
            str(PROGRAMS / "snapshot_fetch.py"),
            "--manifest",
            str(tmp_path / "manifest.json"),
            "--cache-dir",
            str(cache),
            "--log",
            str(log),
        ],
        env={**os.environ, "SNAPSHOT_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, log.read_text().splitlines()[-1], cache


def test_a_copy_lands_as_a_hub_download_leaves_it(served, tmp_path):
    url, seed = served
    status, last, cache = fetch(tmp_path, f"{url}/{TOKEN}", manifest_for(FILES))
    assert status == 0 and " complete: " in last, last
    assert TOKEN not in last
    snapshot = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    for path, content in FILES.items():
        assert os.readlink(snapshot / path) == os.readlink(seed / path)
        assert (snapshot / path).read_bytes() == content
    # Again: every blob is there and checked by size; nothing is fetched.
    status, last, _ = fetch(tmp_path, f"{url}/{TOKEN}", manifest_for(FILES))
    assert status == 0 and "0.0 GB copied" in last, last


def test_a_file_that_differs_from_the_plan_is_refused_and_not_kept(served, tmp_path):
    url, _ = served
    planned = manifest_for({**FILES, "model.safetensors": b"other weights"})
    planned["files"] = [
        {**f, "size": len(FILES["model.safetensors"])} if f["path"] == "model.safetensors" else f
        for f in planned["files"]
    ]
    status, last, cache = fetch(tmp_path, f"{url}/{TOKEN}", planned)
    assert status == 1 and "failed: ValueError: model.safetensors:" in last, last
    blobs = cache / f"models--{REPO.replace('/', '--')}" / "blobs"
    assert not list(blobs.glob("*.incomplete"))


def test_the_wrong_token_and_paths_outside_the_snapshot_get_nothing(served, tmp_path):
    url, _ = served
    status, last, _ = fetch(tmp_path, f"{url}/{'x' * 43}", manifest_for(FILES))
    assert status == 1 and "HTTP Error 404" in last and "x" * 43 not in last, last
    for path in ("../../../../outside", "..%2F..%2F..%2F..%2Foutside", "/etc/passwd", ""):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/{TOKEN}/{path}", timeout=10)
        assert refused.value.code == 404
    assert (
        urllib.request.urlopen(f"{url}/{TOKEN}/config.json", timeout=10).read()
        == (FILES["config.json"])
    )


def test_a_server_without_a_token_does_not_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SNAPSHOT_TOKEN"}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            str(PROGRAMS / "snapshot_serve.py"),
            "--bind",
            "127.0.0.1",
            "--port",
            "1",
            "--snapshot",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "SNAPSHOT_TOKEN" in done.stderr
    assert time.monotonic() - started < 30
