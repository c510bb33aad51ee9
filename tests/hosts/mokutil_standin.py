#!/usr/bin/python3
"""mokutil test double: the firmware's Secure Boot state and MOK list cannot exist on a test
host (a container), so this answers the two questions the deploy asks, with mokutil's own
messages and exit statuses (lcp/mokutil, src/mokutil.c: sb_state() and test_key()):

  mokutil --sb-state        "SecureBoot enabled" / "SecureBoot disabled", exit 0
  mokutil --test-key FILE   "FILE is already enrolled", exit 1 / "FILE is not enrolled", exit 0

The state it reports lives in /etc/mokutil-standin/: ``sb-state`` holds "enabled" or
"disabled"; ``enrolled`` holds the sha256 of each enrolled DER certificate, one per line.
Anything else gets a message on stderr and exit 2: the double never invents output.
Installed as /usr/local/sbin/mokutil (ahead of /usr/bin on root's PATH); standard library only.
"""

import hashlib
import os
import sys
from pathlib import Path

# MOKUTIL_STANDIN_STATE: another folder, for running the double outside a test host.
STATE = Path(os.environ.get("MOKUTIL_STANDIN_STATE", "/etc/mokutil-standin"))


def main(argv: list[str]) -> int:
    if argv == ["--sb-state"]:
        state = (STATE / "sb-state").read_text().strip()
        print(f"SecureBoot {state}")
        return 0
    if len(argv) == 2 and argv[0] == "--test-key":
        digest = hashlib.sha256(Path(argv[1]).read_bytes()).hexdigest()
        enrolled = STATE / "enrolled"
        known = enrolled.read_text().split() if enrolled.exists() else []
        if digest in known:
            print(f"{argv[1]} is already enrolled")
            return 1
        print(f"{argv[1]} is not enrolled")
        return 0
    print(f"mokutil test double: not a recorded question: {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
