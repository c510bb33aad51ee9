"""The model role's download and its no-op check, measured on this machine against the Hub
stand-in (tests/hosts/hubstandin.py) with the real huggingface_hub client.

1. Throughput: the host program the role runs (pyinfra_sglang/host_programs/model_download.py,
   progress thread included) against a plain `hf download` (huggingface_hub's own CLI) of the
   same files from the same server, alternating, REPEAT times each; prints each MB/s and the
   ratio of the medians (goal: >= 0.9).
2. The no-op check: the SnapshotFiles fact's command (sizes only, symlinks followed) on a
   snapshot of FILES files, as the role runs it when a snapshot is complete; prints its median.

    uv run python bench/model_download.py [--gb 1] [--repeat 3] [--files 1000]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checks.facts import SnapshotFiles
from pyinfra_sglang.host_programs import program_path
from tests.hosts.hubstandin import Hub, Repo, serve

REPO = "bench-org/bench-model"


def files_of(total_bytes: int, count: int) -> dict[str, bytes]:
    """``count`` weight shards of ``total_bytes`` together (incompressible bytes)."""
    shard = total_bytes // count
    seed = hashlib.sha256(b"bench").digest() * (shard // 32 + 1)
    return {
        "config.json": b"{}\n",
        **{f"model-{i:05d}-of-{count:05d}.safetensors": seed[:shard] for i in range(count)},
    }


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    total = int(args.gb * 1e9)
    files = files_of(total, 8)
    commit = hashlib.sha1(b"bench commit").hexdigest()
    hf_cli = shutil.which("hf", path=str(Path(sys.executable).parent)) or shutil.which(
        "huggingface-cli", path=str(Path(sys.executable).parent)
    )
    if hf_cli is None:
        raise SystemExit("no hf / huggingface-cli next to this python: uv sync first")
    with tempfile.TemporaryDirectory() as work, serve(Hub({REPO: Repo({commit: files})})) as url:
        env = {"HF_ENDPOINT": url, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PATH": "/usr/bin:/bin"}
        ours, plain = [], []
        for run in range(args.repeat):
            cache = Path(work) / f"ours{run}"
            ours.append(
                timed(
                    [
                        sys.executable,
                        str(program_path("model_download.py")),
                        *("--repo", REPO, "--commit", commit, "--cache-dir", str(cache)),
                        *("--total-bytes", str(total), "--log", str(Path(work) / "log")),
                    ],
                    env,
                )
            )
            shutil.rmtree(cache)
            cache = Path(work) / f"plain{run}"
            plain.append(
                timed(
                    [hf_cli, "download", REPO, "--revision", commit, "--cache-dir", str(cache)],
                    env,
                )
            )
            shutil.rmtree(cache)
        rate = lambda seconds: total / seconds / 1e6  # noqa: E731
        print(f"download of {args.gb:g} GB in 8 files from the Hub stand-in on loopback")
        print(f"  role's program: {', '.join(f'{rate(s):.0f}' for s in ours)} MB/s")
        print(f"  hf download:    {', '.join(f'{rate(s):.0f}' for s in plain)} MB/s")
        ratio = statistics.median(plain) / statistics.median(ours)
        print(f"  ratio (role / hf download, medians): {ratio:.2f}  (goal >= 0.9)")

        snapshot = Path(work) / "snapshot"
        blobs = Path(work) / "blobs"
        snapshot.mkdir()
        blobs.mkdir()
        for i in range(args.files):
            (blobs / f"{i:040x}").write_bytes(b"x" * (i % 4096))
            (snapshot / f"file-{i:05d}.json").symlink_to(blobs / f"{i:040x}")
        command = SnapshotFiles().command(folder=str(snapshot))
        checks = [timed(["sh", "-c", command], env) for _ in range(max(args.repeat, 5))]
        print(
            f"no-op check of a {args.files}-file snapshot (sizes only): median "
            f"{statistics.median(checks) * 1000:.1f} ms over {len(checks)} runs"
        )


if __name__ == "__main__":
    main()
