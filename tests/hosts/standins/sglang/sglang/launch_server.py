"""``python -m sglang.launch_server``: the stand-in server (see sglang._standin.server)."""

import sys

from sglang._standin.server import main

if __name__ == "__main__":
    sys.exit(main())
