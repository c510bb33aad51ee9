"""Generated blocks inside hand-written docs: the text between a ``<!-- NAME:start -->`` line
and a ``<!-- NAME:end -->`` marker. docgen/reference_docs.py fills them all; a module that
fills one block for a command of its own (config/reference.py, the inventory reference) uses
them from here, on the shared floor, without importing the doc generator."""

from __future__ import annotations


def _start(name: str) -> str:
    return f"<!-- {name}:start -->\n"


def _end(name: str) -> str:
    return f"<!-- {name}:end -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with what lies between its ``NAME`` markers replaced by ``body``."""
    start, end = _start(name), _end(name)
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"expected one {start.strip()} line and one {end} marker")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    if body and not body.endswith("\n"):
        body += "\n"
    return head + start + body + end + tail


def block(text: str, name: str) -> str | None:
    """What lies between ``text``'s ``NAME`` markers; None without them."""
    start, end = _start(name), _end(name)
    if start not in text or end not in text.split(start, 1)[1]:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]
