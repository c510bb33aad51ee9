"""Caps on the results files that ``diagnose``, ``report`` and ``ab-compare`` read (data/
diagnosis.toml ``[limits]``, each with why its number): a file over one is refused at once,
naming the file, what exceeded the cap and the cap, rather than hanging, filling memory or
ending in a RecursionError from json.loads on deep nesting. Here, beside the results folder
(results.py) that writes those files, so the readers above it (diagnosis, report, tuning)
and the folder's own reads share one set of caps."""

from __future__ import annotations

import json
import re
from functools import cache
from itertools import accumulate
from pathlib import Path

from pyinfra_sglang import data
from pyinfra_sglang.data_models import DiagnosisLimits

WHERE = "pyinfra_sglang/data/diagnosis.toml [limits]"
# Inside a string, an escaped quote or backslash is the only escape that can hide a quote.
_STRING = re.compile(rb'"[^"]*"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
for _open, _close in zip(b"[{", b"]}"):
    _STEP[_open], _STEP[_close] = 1, -1
_CHUNK = 1 << 20


@cache
def limits() -> DiagnosisLimits:
    return data.diagnosis().limits


class OverCapError(ValueError):
    """A results file beyond one of the caps."""


def over_cap(where: object, found: str, key: str) -> OverCapError:
    """``<where>: <found>, over the cap of <cap> (<key> in data/diagnosis.toml [limits])``."""
    cap = getattr(limits(), key)
    shown = f"{cap:g}" if isinstance(cap, float) else str(cap)
    return OverCapError(f"{where}: {found}, over the cap of {shown} ({key} in {WHERE})")


def check_count(where: object, count: int, what: str, key: str) -> None:
    """OverCapError ``<where>: <count> <what>, over the cap...`` past the cap ``key``."""
    if count > getattr(limits(), key):
        raise over_cap(where, f"{count} {what}", key)


def read_capped(path: str | Path) -> str:
    """The text of ``path``, refused (OverCapError) past max_file_bytes or max_json_depth
    before any of it is parsed; OSError or UnicodeDecodeError as reading raises them."""
    cap = limits().max_file_bytes
    with open(path, "rb") as file:
        raw = file.read(cap + 1)  # never more, whatever the file's size says
    if len(raw) > cap:
        raise over_cap(path, f"more than {cap} bytes", "max_file_bytes")
    check_depth(path, raw)
    return raw.decode()


def nesting_depth(raw: bytes, stop_above: int | None = None) -> int:
    """The deepest nesting of JSON arrays and objects in ``raw`` (brackets inside strings not
    counted), at C speed but for one pass over the brackets; it stops early once past
    ``stop_above``."""
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _STRING.sub(b"", raw.translate(None, _NOT_STRUCTURE)).translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):
        chunk = brackets[start : start + _CHUNK]
        running = list(accumulate(map(_STEP.__getitem__, chunk), initial=depth))
        deepest, depth = max(deepest, max(running)), running[-1]
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def check_depth(where: object, raw: bytes) -> None:
    cap = limits().max_json_depth
    depth = nesting_depth(raw, cap)
    if depth > cap:
        raise over_cap(where, f"JSON nested at least {depth} levels deep", "max_json_depth")


def loads(where: object, text: str):
    """json.loads of ``text`` (already read by read_capped); json.JSONDecodeError as it raises
    it, OverCapError for nesting the depth check missed (a RecursionError otherwise)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise over_cap(where, "JSON nested too deep to parse", "max_json_depth") from None


def load_json(path: str | Path):
    """The JSON document in ``path``, read within the caps."""
    return loads(path, read_capped(path))
