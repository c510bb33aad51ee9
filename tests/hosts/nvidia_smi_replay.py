#!/usr/bin/python3
"""nvidia-smi test double: replays what the real nvidia-smi printed on a real GPU host.

Installed as /usr/bin/nvidia-smi by the test apt repository's nvidia-utils package, so it
must run with a bare Debian python3 (standard library only).

Captures live in /usr/share/nvidia-smi-replay/<capture>/ (see tests/fixtures/gpu/README.md):
smi.txt holds blocks "### <command>", the command's output, "### rc=N"; smi_q.txt and
smi_q.xml hold `nvidia-smi -q` and `nvidia-smi -q -x`. The capture is h200x2-nvlink-vm
unless /etc/nvidia-smi-replay/capture names another folder. NVIDIA_SMI_REPLAY_ROOT
prefixes both paths, so the double also runs from an extracted package tree.

Arguments no capture recorded get a message on stderr and exit 2: the double never
invents output.

A test host is a container, whose kernel is the outer one: where /etc/nvidia-smi-replay/
loaded-driver names a release (the driver package writes it where a test asked, as after a
reboot into the installed driver: tests/hosts/aptrepo.py), every mention of the capture's own
driver release ("Driver Version" of its smi.txt) is replayed as that release.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DEFAULT_CAPTURE = "h200x2-nvlink-vm"
CAPTURES_DIR = "usr/share/nvidia-smi-replay"
CAPTURE_CHOICE = "etc/nvidia-smi-replay/capture"
LOADED_DRIVER = "etc/nvidia-smi-replay/loaded-driver"
DRIVER_VERSION = re.compile(rb"Driver Version:\s+(\S+)")
UNKNOWN_ARGS_STATUS = 2
# Whole-file captures: the block format would be awkward for these long outputs.
WHOLE_FILE_CAPTURES = {("-q",): "smi_q.txt", ("-q", "-x"): "smi_q.xml", ("-x", "-q"): "smi_q.xml"}
RC_LINE = re.compile(rb"^### rc=(-?\d+)\r?\n?$")


def capture_dir(root: Path) -> Path:
    choice = root / CAPTURE_CHOICE
    name = choice.read_text().strip() if choice.is_file() else ""
    return root / CAPTURES_DIR / (name or DEFAULT_CAPTURE)


def find_block(smi_txt: bytes, command: str) -> tuple[bytes, int] | None:
    """The recorded output and exit status of `command`, or None if it was not captured."""
    header = f"### {command}".encode()
    lines = smi_txt.splitlines(keepends=True)
    for start, line in enumerate(lines):
        if line.rstrip(b"\r\n") != header:
            continue
        for end in range(start + 1, len(lines)):
            rc = RC_LINE.match(lines[end])
            if rc:
                return b"".join(lines[start + 1 : end]), int(rc.group(1))
        return None  # a block without its rc line is a broken capture, not an answer
    return None


def replay(args: list[str], root: Path) -> tuple[bytes, int] | None:
    captures = capture_dir(root)
    whole_file = WHOLE_FILE_CAPTURES.get(tuple(args))
    if whole_file:
        path = captures / whole_file
        return (path.read_bytes(), 0) if path.is_file() else None
    smi_txt = captures / "smi.txt"
    if not smi_txt.is_file():
        return None
    return find_block(smi_txt.read_bytes(), " ".join(["nvidia-smi", *args]))


def loaded_release(root: Path) -> tuple[bytes, bytes] | None:
    """(the capture's driver release, the one loaded instead), or None to replay as is."""
    chosen = root / LOADED_DRIVER
    smi_txt = capture_dir(root) / "smi.txt"
    if not chosen.is_file() or not smi_txt.is_file():
        return None
    loaded = chosen.read_bytes().strip()
    captured = DRIVER_VERSION.search(smi_txt.read_bytes())
    return (captured.group(1), loaded) if captured and loaded else None


def main(args: list[str]) -> int:
    root = Path(os.environ.get("NVIDIA_SMI_REPLAY_ROOT") or "/")
    answer = replay(args, root)
    swap = loaded_release(root) if answer else None
    if answer and swap:
        answer = (answer[0].replace(*swap), answer[1])
    if answer is None:
        asked = " ".join(args) or "(no arguments)"
        sys.stderr.write(
            f"nvidia-smi (replay double): no recorded output for {asked} in {capture_dir(root)}\n"
        )
        return UNKNOWN_ARGS_STATUS
    output, status = answer
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
