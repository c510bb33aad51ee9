"""Parsers of the small file and shell outputs facts read (find, df, head, ls): pure functions
of the output lines, so each is unit-tested without a host."""

from __future__ import annotations

from collections.abc import Iterable


def parse_sized_files(output: Iterable[str]) -> dict[str, int]:
    """``find -printf '%s\\t%P\\n'`` lines as {relative path: bytes}; other lines skipped."""
    files = {}
    for line in output:
        size, _, path = line.partition("\t")
        if size.isdigit() and path:
            files[path] = int(size)
    return files


def parse_counts(output: Iterable[str]) -> dict[str, int]:
    """``<name> <number>`` lines as {name: number}; lines without a number skipped."""
    counts = {}
    for line in output:
        key, _, value = line.strip().partition(" ")
        if value.strip().isdigit():
            counts[key] = int(value)
    return counts


def parse_first_line(output: Iterable[str]) -> str | None:
    """The first line, stripped; None when there is none or it is empty."""
    lines = [line.strip() for line in output]
    return lines[0] if lines and lines[0] else None


def parse_first_nonempty(output: Iterable[str]) -> str | None:
    """The first line with text, stripped; None when there is none."""
    return next((line.strip() for line in output if line.strip()), None)


def parse_last_int(output: Iterable[str]) -> int | None:
    """The integer on the last line with text (df's free bytes, an HTTP status); None when
    that line is not a number (``none``: nothing answered)."""
    values = [line.strip() for line in output if line.strip()]
    return int(values[-1]) if values and values[-1].isdigit() else None


def parse_venvs_by_age(output: Iterable[str]) -> list[str]:
    """``stat -c '%Y %n'`` lines of ``<venv>/pyvenv.cfg`` files (sorted newest first by the
    shell) as the venv folders, in that order."""
    found = []
    for line in output:
        parts = line.strip().split(" ", 1)
        if len(parts) == 2 and parts[0].isdigit() and parts[1].endswith("/pyvenv.cfg"):
            found.append(parts[1].removesuffix("/pyvenv.cfg").rstrip("/"))
    return found


def count_gpu_classes(output: Iterable[str]) -> int:
    """Lines of PCI class codes (``0x030000``) that are display (0x0300) or 3D (0x0302)
    controllers: NVIDIA GPUs when the caller read only vendor 0x10de's devices."""
    return sum(1 for line in output if line.strip().startswith(("0x0300", "0x0302")))


def parse_file_states(output: Iterable[str]) -> dict[str, dict | None]:
    """``<path>\\t<user> <group> <octal mode>\\t<sha1>`` lines (``<path>\\t-`` for a path that
    is no regular file) as ``{path: {"user", "group", "mode" (int, as pyinfra's
    ensure_mode_int gives), "sha1"}, or None}``; a path whose line is malformed is left out
    (nothing known of it)."""
    states: dict[str, dict | None] = {}
    for line in output:
        fields = line.rstrip("\n").split("\t")
        if len(fields) == 2 and fields[1] == "-":
            states[fields[0]] = None
            continue
        if len(fields) != 3:
            continue
        owner = fields[1].split(" ")
        digest = fields[2].strip()
        if len(owner) == 3 and owner[2].isdigit() and len(digest) == 40:
            states[fields[0]] = {
                "user": owner[0],
                "group": owner[1],
                "mode": int(owner[2]),
                "sha1": digest,
            }
    return states
