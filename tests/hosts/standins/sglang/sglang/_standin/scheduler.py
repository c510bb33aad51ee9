"""A stand-in scheduler process: what SGLang's per-GPU scheduler (TP worker) processes are to
its HTTP server, reduced to what a stop depends on.

As SGLang's: a child of the HTTP (main) process, in the same cgroup, one per tensor-parallel
rank; it installs no SIGTERM handler, so a SIGTERM sent to it (systemd's
KillMode=control-group signals every process of the unit) kills it at once, and the requests
it was generating are cut. It exits when the main process tells it to: here, when its stdin
(a pipe from the main process) closes, which also happens when the main process dies.

Rank 0 generates the tokens: it listens on an abstract Unix socket; each connection sends
"<tokens> <seconds per token>\\n" and gets one byte per token, at that pace.
"""

from __future__ import annotations

import socket
import sys
import threading
import time


def _generate(conn: socket.socket) -> None:
    with conn:
        try:
            line = conn.makefile("rb").readline().split()
            count, delay = int(line[0]), float(line[1])
            for _ in range(count):
                time.sleep(delay)
                conn.sendall(b".")
        except (OSError, ValueError, IndexError):
            return


def _serve(name: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(256)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_generate, args=(conn,), daemon=True).start()


def main(argv: list[str]) -> int:
    name, rank = argv[0], int(argv[1])
    if rank == 0:
        threading.Thread(target=_serve, args=(name,), daemon=True).start()
    sys.stdin.buffer.read()  # until the main process closes the pipe (or dies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
