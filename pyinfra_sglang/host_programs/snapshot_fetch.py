"""Copy a model snapshot from the site's seed host (snapshot_serve.py) into this host's
Hugging Face Hub cache, each file checked against the planned list, so the host never asks
the Hub (roles/model.py, model_fetch_once).

``python3 snapshot_fetch.py --manifest FILE --cache-dir DIR --log FILE`` with SNAPSHOT_URL
(``http://seed:port/<token>``) in the environment (systemd's EnvironmentFile, root-only).
The manifest, from the Hub's own file list read on the controller: the repository, the
commit, and per file its path, size and blob id (the sha256 of an LFS file, the git blob id
of another: the names huggingface_hub gives the cache's blobs). A file lands as
``blobs/<id>`` only once its size and hash match, then ``snapshots/<commit>/<path>`` links
to it, as a download from the Hub leaves it. Writes progress to the log; its last line is
``complete: ...`` or ``failed: ...``. Standard library only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

CHUNK = 1024 * 1024


def log(path: Path, line: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with path.open("a") as out:
        out.write(f"{stamp} {line}\n")


def blob_hash(lfs: bool, size: int):
    """The hash huggingface_hub names the blob by: sha256 of an LFS file's bytes, the git
    blob id (sha1 of "blob <size>\\0" and the bytes) of another."""
    if lfs:
        return hashlib.sha256()
    digest = hashlib.sha1()
    digest.update(f"blob {size}\0".encode())
    return digest


def fetch_file(url: str, entry: dict, blobs: Path, timeout: float) -> int:
    """The file into blobs/<id>, checked; returns the bytes fetched."""
    target = blobs / entry["etag"]
    if target.is_file() and target.stat().st_size == entry["size"]:
        return 0
    partial = target.with_name(target.name + ".incomplete")
    digest = blob_hash(entry["lfs"], entry["size"])
    done = 0
    with urllib.request.urlopen(f"{url}/{quote(entry['path'])}", timeout=timeout) as answer:
        with partial.open("wb") as out:
            while True:
                chunk = answer.read(CHUNK)
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
    if done != entry["size"] or digest.hexdigest() != entry["etag"]:
        partial.unlink()
        raise ValueError(
            f"{entry['path']}: {done} bytes with hash {digest.hexdigest()[:12]}, the plan "
            f"says {entry['size']} bytes and {entry['etag'][:12]}"
        )
    partial.rename(target)
    return done


def link(snapshot: Path, entry: dict) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<id>, one more ../ per folder in the path."""
    path = snapshot / entry["path"]
    path.parent.mkdir(parents=True, exist_ok=True)
    up = "../" * (len(Path(entry["path"]).parts) + 1)
    target = f"{up}blobs/{entry['etag']}"
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    log_path = Path(args.log)
    url = os.environ.pop("SNAPSHOT_URL", "").rstrip("/")
    try:
        manifest = json.loads(Path(args.manifest).read_text())
        repo, commit, files = manifest["repo"], manifest["commit"], manifest["files"]
        folder = Path(args.cache_dir) / ("models--" + repo.replace("/", "--"))
        blobs, snapshot = folder / "blobs", folder / "snapshots" / commit
        blobs.mkdir(parents=True, exist_ok=True)
        user = pwd.getpwuid(os.getuid()).pw_name
        total = sum(entry["size"] for entry in files)
        log(log_path, f"copying {repo} at {commit} from the site's seed into {folder} as {user}")
        started, fetched = time.monotonic(), 0
        for entry in files:
            fetched += fetch_file(url, entry, blobs, args.timeout)
            link(snapshot, entry)
            log(log_path, f"{fetched / 1e9:.1f} of {total / 1e9:.1f} GB: {entry['path']}")
    except Exception as error:  # any failure: its reason is the log's last line
        reason = str(error).replace(url, "<seed>") if url else str(error)
        log(log_path, f"failed: {type(error).__name__}: {reason.splitlines()[0][:300]}")
        return 1
    seconds = time.monotonic() - started
    rate = fetched / seconds / 1e6 if seconds > 0 else 0.0
    log(
        log_path,
        f"complete: {total / 1e9:.1f} GB in {snapshot}; {fetched / 1e9:.1f} GB copied from "
        f"the site's seed in {seconds:.1f} s, {rate:.0f} MB/s",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
