"""Link bandwidth probe, run with the SGLang venv's Python (torch) on a GPU host: what each
link really carries, to set against its theoretical rate.

- host->GPU and GPU->host copy bandwidth per GPU, one GPU at a time (pinned memory);
- GPU->GPU copy bandwidth per ordered pair of GPUs;
- NCCL all-reduce bus bandwidth over all GPUs (one process per GPU), at several sizes;
  bus bandwidth = algorithm bandwidth * 2(n-1)/n, as nccl-tests report it.

Prints one JSON object; exits 3 without CUDA. Bounded: each measurement runs SECONDS.

The peer tests (copies, then the all-reduce) run in child processes with a deadline: their
planned time plus --peer-timeout. Where PCIe ACS or the IOMMU redirect peer traffic they
hang rather than fail (NVIDIA/nccl#1999, #2079); a child past its deadline is killed and the
JSON says so under "peer_hang" ({"stage": "copy"|"all-reduce", "limit_s": N}), the
remaining peer test skipped.

    python link_probe.py [--seconds 0.5] [--size-mib 256] [--allreduce-mib 1,16,256]
                         [--peer-timeout 45]
"""

import argparse
import json
import os
import queue as queues
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


def _peer_worker(count: int, size: int, seconds: float, results) -> None:
    results.put(peer_links(count, size, seconds))


def _kill(processes) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(5)


def bounded_peer_links(count: int, size: int, seconds: float, limit: float):
    """peer_links in a child process: (rows, None), or (None, hang) past ``limit`` s."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_peer_worker, args=(count, size, seconds, results))
    child.start()
    try:
        rows = results.get(timeout=limit)
    except queues.Empty:
        _kill([child])
        return None, {"stage": "copy", "limit_s": round(limit)}
    child.join()
    return rows, None


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


def allreduce(count: int, sizes: list[int], seconds: float, limit: float):
    """(rows, None), or (None, hang) when rank 0 has no result within ``limit`` s: every
    rank is killed then (a rank stuck in NCCL never returns by itself)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.Queue()
    ranks = mp.start_processes(
        _allreduce_worker,
        args=(count, sizes, seconds, port, queue),
        nprocs=count,
        join=False,
        start_method="spawn",
    )
    try:
        rows = queue.get(timeout=limit)
    except queues.Empty:
        _kill(ranks.processes)
        return None, {"stage": "all-reduce", "limit_s": round(limit)}
    while not ranks.join():
        pass
    return rows, None


def main() -> int:
    parser = argparse.ArgumentParser(description="link bandwidth probe")
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--allreduce-mib", default="1,16,256")
    parser.add_argument("--peer-timeout", type=float, default=45.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 3
    count = torch.cuda.device_count()
    size = args.size_mib * MIB
    sizes = [int(m) * MIB for m in args.allreduce_mib.split(",")]
    result = {"gpus": host_links(count, size, args.seconds), "peers": [], "allreduce": []}
    if count > 1:
        # Deadline: what the measurements plan to take, plus the slack for a slow start.
        pairs = count * (count - 1)
        peers, hang = bounded_peer_links(
            count, size, args.seconds, pairs * args.seconds + args.peer_timeout
        )
        if peers is not None:
            result["peers"] = peers
            rows, hang = allreduce(
                count, sizes, args.seconds, len(sizes) * 2 * args.seconds + args.peer_timeout
            )
            result["allreduce"] = rows or []
        if hang:
            result["peer_hang"] = hang
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
