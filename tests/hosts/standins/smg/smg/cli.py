"""``smg``: the stand-in of smg's CLI (smg/cli.py of smg 1.13.0). ``smg launch ARGS`` starts
the gateway with ARGS (its router flags); ``--version`` prints the release; anything else
prints the usage and exits 1, as the real one. ``serve`` (workers + gateway in one) is not
stood in for: it exits 2 saying so."""

from __future__ import annotations

import sys

from smg.version import __version__

USAGE = (
    "usage: smg [-h] {launch,serve} ...\n\n"
    "Shepherd Model Gateway - High-performance inference router (test stand-in)\n"
)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--version", "-V", "--version-verbose"):
        print(f"smg {__version__}")
        sys.exit(0)
    if not argv or argv[0] not in ("launch", "serve", "-h", "--help"):
        print(USAGE, end="")
        sys.exit(1)
    if argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        sys.exit(0)
    if argv[0] == "serve":
        print("smg serve: not part of the test stand-in", file=sys.stderr)
        sys.exit(2)
    from smg.launch_router import main as launch

    sys.exit(launch(argv[1:]))


if __name__ == "__main__":
    main()
