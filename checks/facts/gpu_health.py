"""Facts of the GPUs' health: the kernel log's Xid lines, nvidia-smi's memory error
counters, NVLink errors, dcgmi diag."""

from __future__ import annotations

from pyinfra.api import FactBase

from pyinfra_sglang import data
from pyinfra_sglang.parsers.dcgm import parse_dcgm_diag
from pyinfra_sglang.parsers.gpu_health import (
    log_coverage,
    parse_health_q,
    parse_nvlink_errors,
    parse_xid_lines,
)

_UNREAD = "### unread"


_NO_DCGMI = "### no dcgmi"


_RC = "### rc="


_XID_TOTAL = "### xid-total "


_XID_READ = "### xid-read "


def _read_or_none(output) -> list[str] | None:
    lines = list(output)
    return None if _UNREAD in (line.strip() for line in lines) else lines


class KernelXids(FactBase[dict | None]):
    """The kernel log's Xid lines of this boot, parsed, and what was read: journald's kernel
    messages of this boot where it has them (kept whole, as the ring buffer is not), else
    dmesg's ring buffer; ``{"events": [...], "read": "<source>, since <first stamp>, N
    lines"}``. None when neither could be read."""

    def command(self) -> str:
        # At most 20 lines per GPU and Xid, not the last N lines: a flood of one Xid (13 and
        # 31 are any GPU user's to cause) never pushes a rarer one (79) out of what is read.
        # Past that, the last line and the total count come at the end ("### xid-total"),
        # then the source, the lines read and the first of them ("### xid-read").
        read = (
            "awk '/^### xid-source / { src = $3; next } /^### unread/ { print; next } "
            "{ if (++lines == 1) first = $0 } /NVRM: Xid/ { k = $0; "
            "if (match($0, /Xid \\([^)]*\\): [0-9]+/)) k = substr($0, RSTART, RLENGTH); "
            "if (++n[k] < 20) print; else last[k] = $0 } "
            f'END {{ for (k in last) print "{_XID_TOTAL}" n[k] " " last[k]; '
            f'if (src != "") print "{_XID_READ}" src " " lines + 0 " " first }}\''
        )
        journal = "journalctl -k -b --no-pager -q -o short-iso"
        return (
            f"{{ if {journal} 2>/dev/null | grep -q .; then echo '### xid-source journald'; "
            f"{journal} 2>/dev/null; elif dmesg >/dev/null 2>&1; then "
            "echo '### xid-source dmesg'; dmesg 2>/dev/null; "
            f"else echo '{_UNREAD}'; fi; }} | {read}; true"
        )

    def process(self, output) -> dict | None:
        lines = _read_or_none(output)
        if lines is None:
            return None
        marked = (_XID_TOTAL, _XID_READ)
        events = list(parse_xid_lines(line for line in lines if not line.startswith(marked)))
        read = None
        for line in lines:
            if line.startswith(_XID_TOTAL):
                total, _, rest = line[len(_XID_TOTAL) :].partition(" ")
                for event in parse_xid_lines([rest]):
                    events.append({**event, "total": int(total) if total.isdigit() else None})
            elif line.startswith(_XID_READ):
                source, _, rest = line[len(_XID_READ) :].partition(" ")
                count, _, first = rest.partition(" ")
                if count.isdigit() and len(count) < 12:
                    read = log_coverage(first, int(count), source)
        return {"events": events, "read": read}


class NvidiaMemoryHealth(FactBase[list | None]):
    """`nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` per GPU (parse_health_q); None
    when nvidia-smi could not print it."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT 2>/dev/null || echo '{_UNREAD}'"

    def process(self, output) -> list | None:
        lines = _read_or_none(output)
        return None if lines is None else parse_health_q(lines)


class DcgmDiag(FactBase[dict]):
    """`dcgmi diag -r <level>` (parse_dcgm_diag) where dcgmi is on PATH: {"present": true,
    "level", "rc", "metadata", "tests", "head" (its first lines outside the table)};
    {"present": false, "level"} where it is not (no DCGM: not a problem)."""

    def command(self, level: int) -> str:
        timeout = data.dcgm().diag.timeout_s[str(level)]
        return (
            f"command -v dcgmi >/dev/null 2>&1 || {{ echo '{_NO_DCGMI}'; exit 0; }}; "
            f'timeout {timeout} dcgmi diag -r {int(level)} 2>&1; echo "{_RC}$?"'
        )

    def process(self, output) -> dict:
        lines = list(output)
        if _NO_DCGMI in lines:
            return {"present": False}
        rc = None
        if lines and lines[-1].startswith(_RC):
            rc = int(lines.pop()[len(_RC) :] or 0)
        parsed = parse_dcgm_diag(lines)
        head = [line.strip() for line in lines if line.strip() and line.strip()[0] not in "|+"]
        return {"present": True, "rc": rc, **parsed, "head": head[:5]}


class NvidiaNvlinkErrors(FactBase[dict | None]):
    """`nvidia-smi nvlink -e` error counters (parse_nvlink_errors); {} without links, None
    when nvidia-smi could not print it."""

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi nvlink -e 2>/dev/null || echo '{_UNREAD}'"

    def process(self, output) -> dict | None:
        lines = _read_or_none(output)
        return None if lines is None else parse_nvlink_errors(lines)
