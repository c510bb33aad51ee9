"""Download a model's snapshot at one commit into the Hugging Face Hub cache, with the
venv's huggingface_hub (run by its python), and write progress to a log file every
``--every`` seconds: bytes done of the total, rate, ETA. Resumable: huggingface_hub keeps a
cut-off file as ``<blob>.incomplete`` and continues it with a Range request.

The token, when the model needs one, comes from HF_TOKEN, the endpoint from HF_ENDPOINT: the
environment systemd gives the unit from a root-only file (never argv). Exit 0 when the
snapshot is complete, 1 with the reason as the log's last line otherwise. Python 3.9+;
huggingface_hub from the venv.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
import threading
import time
from pathlib import Path


def cached_bytes(blobs: Path) -> int:
    """Bytes in the cache's blob folder, cut-off downloads included."""
    total = 0
    if blobs.is_dir():
        for entry in os.scandir(blobs):
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass  # renamed while we looked
    return total


def duration(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def progress_line(done: int, total: int, rate: float) -> str:
    gb = 1e9
    eta = (total - done) / rate if rate > 0 else None
    eta_text = duration(eta) if eta is not None else "unknown"
    return (
        f"{done / gb:.1f} of {total / gb:.1f} GB, {rate / 1e6:.0f} MB/s, ETA {eta_text}"
        if total
        else f"{done / gb:.1f} GB"
    )


def complete_line(done: int, fetched: int, seconds: float, folder: str) -> str:
    """What this run fetched (a resumed run fetches only the rest), in how long, at what
    mean rate, and the whole snapshot's size."""
    rate = fetched / seconds if seconds > 0 else 0.0
    return (
        f"complete: {done / 1e9:.1f} GB in {folder}; {fetched / 1e9:.1f} GB fetched in "
        f"{duration(seconds)}, {rate / 1e6:.0f} MB/s"
    )


def log(path: Path, line: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with path.open("a") as out:
        out.write(f"{stamp} {line}\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--total-bytes", type=int, default=0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--every", type=float, default=10.0)
    args = parser.parse_args(argv)

    log_path = Path(args.log)
    blobs = Path(args.cache_dir) / ("models--" + args.repo.replace("/", "--")) / "blobs"
    done = threading.Event()

    def report() -> None:
        last, last_at = cached_bytes(blobs), time.monotonic()
        while not done.wait(args.every):
            now, at = cached_bytes(blobs), time.monotonic()
            rate = (now - last) / (at - last_at) if at > last_at else 0.0
            log(log_path, progress_line(now, args.total_bytes, rate))
            last, last_at = now, at

    # Who it runs as, on the record: the service user, never root (roles/model.py).
    user = pwd.getpwuid(os.getuid()).pw_name
    log(log_path, f"downloading {args.repo} at {args.commit} into {args.cache_dir} as {user}")
    started_bytes, started_at = cached_bytes(blobs), time.monotonic()
    threading.Thread(target=report, daemon=True).start()
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            repo_id=args.repo, revision=args.commit, cache_dir=args.cache_dir
        )
    except Exception as error:  # any failure: its reason is the log's last line
        done.set()
        log(log_path, f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
        return 1
    done.set()
    now = cached_bytes(blobs)
    log(log_path, complete_line(now, now - started_bytes, time.monotonic() - started_at, folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
