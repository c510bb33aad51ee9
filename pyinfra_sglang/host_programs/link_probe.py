"""Link bandwidth probe, run with the SGLang venv's Python (torch) on a GPU host: what each
link really carries, to set against its theoretical rate.

- host->GPU and GPU->host copy bandwidth per GPU, one GPU at a time (pinned memory);
- GPU->GPU copy bandwidth per ordered pair of GPUs;
- NCCL all-reduce bus bandwidth over all GPUs (one process per GPU), at several sizes;
  bus bandwidth = algorithm bandwidth * 2(n-1)/n, as nccl-tests report it.

Prints one JSON object; exits 3 without CUDA. Bounded: each measurement runs SECONDS.

    python link_probe.py [--seconds 0.5] [--size-mib 256] [--allreduce-mib 1,16,256]
"""

import argparse
import json
import os
import sys
import time

try:
    import torch
except ImportError:
    print(json.dumps({"error": "torch is not installed"}))
    sys.exit(3)

MIB = 1 << 20


def timed_copies(target, source, device: int, seconds: float) -> float:
    """GB/s of repeated copies of ``source`` into ``target`` for about ``seconds``."""
    target.copy_(source, non_blocking=True)  # warm-up: first copies pay for setup
    torch.cuda.synchronize(device)
    copies, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        target.copy_(source, non_blocking=True)
        copies += 1
        if copies % 4 == 0:
            torch.cuda.synchronize(device)
    torch.cuda.synchronize(device)
    return copies * source.numel() * source.element_size() / (time.perf_counter() - start) / 1e9


def host_links(count: int, size: int, seconds: float) -> list[dict]:
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    results = []
    for index in range(count):
        device = torch.empty(size, dtype=torch.uint8, device=f"cuda:{index}")
        results.append(
            {
                "index": index,
                "h2d_gbs": round(timed_copies(device, host, index, seconds), 2),
                "d2h_gbs": round(timed_copies(host, device, index, seconds), 2),
            }
        )
        del device
    return results


def peer_links(count: int, size: int, seconds: float) -> list[dict]:
    buffers = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(count)]
    results = []
    for src in range(count):
        for dst in range(count):
            if src != dst:
                results.append(
                    {
                        "src": src,
                        "dst": dst,
                        "p2p_access": torch.cuda.can_device_access_peer(src, dst),
                        "gbs": round(timed_copies(buffers[dst], buffers[src], src, seconds), 2),
                    }
                )
    return results


def _allreduce_worker(
    rank: int, world: int, sizes: list[int], seconds: float, port: int, queue
) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{rank}")
    )
    rows = []
    for size in sizes:
        tensor = torch.ones(size // 2, dtype=torch.bfloat16, device=f"cuda:{rank}")
        dist.all_reduce(tensor)  # warm-up: NCCL builds its rings and channels
        torch.cuda.synchronize()
        # Rank 0 times one more call and picks a count that fills ``seconds``; every rank
        # must run the same count, so it is broadcast once, not decided per call.
        start = time.perf_counter()
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        count = torch.tensor(
            [min(100_000, max(3, int(seconds / max(time.perf_counter() - start, 1e-6))))],
            device=f"cuda:{rank}",
        )
        dist.broadcast(count, 0)
        dist.barrier(device_ids=[rank])
        start = time.perf_counter()
        for _ in range(int(count.item())):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        algbw = int(count.item()) * size / (time.perf_counter() - start) / 1e9
        rows.append(
            {
                "size_mib": size // MIB,
                "algbw_gbs": round(algbw, 2),
                "busbw_gbs": round(algbw * 2 * (world - 1) / world, 2),
            }
        )
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def allreduce(count: int, sizes: list[int], seconds: float) -> list[dict]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.Queue()
    mp.start_processes(
        _allreduce_worker,
        args=(count, sizes, seconds, port, queue),
        nprocs=count,
        join=True,
        start_method="spawn",
    )
    return queue.get(timeout=5)


def main() -> int:
    parser = argparse.ArgumentParser(description="link bandwidth probe")
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--allreduce-mib", default="1,16,256")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 3
    count = torch.cuda.device_count()
    size = args.size_mib * MIB
    result = {
        "gpus": host_links(count, size, args.seconds),
        "peers": peer_links(count, size, args.seconds) if count > 1 else [],
        "allreduce": allreduce(
            count, [int(m) * MIB for m in args.allreduce_mib.split(",")], args.seconds
        )
        if count > 1
        else [],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
