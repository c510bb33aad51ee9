"""All-reduce preflight of a multi-node group, run with the SGLang venv's Python (torch) on
each member at once, before the group's servers start: torch.distributed over the Gloo
backend, rendezvous at the group's own address and port (SGLang's --dist-init-addr), over
the interface GLOO_SOCKET_IFNAME names (the one the server's env file sets).

It proves what a group start needs first: every member reaches the rendezvous, the members
reach each other over the bootstrap interface, an all-reduce returns the right sum; and it
measures that all-reduce's bus bandwidth (algorithm bandwidth * 2(n-1)/n, as nccl-tests
report it), to set against the interface's line rate.

Bounded: the rendezvous and each collective fail after --timeout-s (torch's process group
timeout) instead of hanging; the caller also runs it under timeout(1).

Prints one JSON object; exits 3 without torch, 2 on an error (the JSON says which).

    python allreduce_preflight.py --rank R --world N --rendezvous HOST:PORT
                                  [--size-mib 64] [--iterations 5] [--timeout-s 120]
"""

import argparse
import datetime
import json
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError as error:
    print(json.dumps({"error": f"torch is not importable: {error}"}))
    sys.exit(3)

MIB = 1 << 20


def read_text(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def line_rate_mbps(interface: str | None) -> int | None:
    """The interface's line rate in Mb/s (/sys/class/net/IF/speed); None where the kernel
    does not say (a link down reads -1, some virtual interfaces refuse the read)."""
    if not interface:
        return None
    text = read_text(f"/sys/class/net/{interface}/speed")
    try:
        speed = int(text) if text is not None else None
    except ValueError:
        return None
    return speed if speed and speed > 0 else None


def rdma_ports() -> list[dict]:
    """Each InfiniBand/RoCE port's state and rate as sysfs gives them."""
    root = "/sys/class/infiniband"
    found = []
    for device in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        ports = f"{root}/{device}/ports"
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            found.append(
                {
                    "device": device,
                    "port": port,
                    "state": read_text(f"{ports}/{port}/state"),
                    "rate": read_text(f"{ports}/{port}/rate"),
                }
            )
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--rendezvous", required=True, help="HOST:PORT of rank 0")
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args()

    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    out = {
        "rank": args.rank,
        "world": args.world,
        "rendezvous": args.rendezvous,
        "timeout_s": args.timeout_s,
        "backend": "gloo",
        "interface": interface,
        "line_rate_mbps": line_rate_mbps(interface),
        "rdma_ports": rdma_ports(),
        "torch": torch.__version__,
    }
    host, _, port = args.rendezvous.rpartition(":")
    started = time.monotonic()
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{host}:{port}",
            rank=args.rank,
            world_size=args.world,
            timeout=datetime.timedelta(seconds=args.timeout_s),
        )
    except Exception as error:  # the rendezvous failed or ran out of time: say which
        out.update(stage="rendezvous", error=f"{type(error).__name__}: {error}")
        out["elapsed_s"] = round(time.monotonic() - started, 3)
        print(json.dumps(out))
        return 2
    out["rendezvous_s"] = round(time.monotonic() - started, 3)
    count = args.size_mib * MIB // 4
    try:
        # Rank r contributes r + 1 everywhere: the sum is n(n+1)/2 in every element.
        tensor = torch.full((count,), float(args.rank + 1), dtype=torch.float32)
        dist.all_reduce(tensor)
        expected = args.world * (args.world + 1) / 2
        out["correct"] = bool(torch.all(tensor == expected).item())
        dist.barrier()
        begin = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(tensor)
        seconds = (time.perf_counter() - begin) / args.iterations
    except Exception as error:
        out.update(stage="all-reduce", error=f"{type(error).__name__}: {error}")
        print(json.dumps(out))
        return 2
    finally:
        dist.destroy_process_group()
    size = count * 4
    algbw = size / seconds / 1e9
    out.update(
        bytes=size,
        iterations=args.iterations,
        seconds=round(seconds, 6),
        algbw_gbs=round(algbw, 3),
        busbw_gbs=round(algbw * 2 * (args.world - 1) / args.world, 3),
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
