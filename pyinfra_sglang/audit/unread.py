"""Fields a check needed but did not get: no such column in the input, or a value nvidia-smi
could not read. Checks report these as ``...-unknown`` findings, never as passing."""

from __future__ import annotations


def unread_fields(row: dict, fields) -> dict[str, str]:
    """``{field: "missing" | "unreadable"}`` for ``fields``, those of a --query-gpu row a check
    could not use: ``missing`` when the row has no such column, else ``unreadable`` (nvidia-smi
    printed N/A, [N/A], ERR! or something else than the check expects)."""
    return {field: "missing" if field not in row else "unreadable" for field in fields}


def unread_text(unread: dict[str, str]) -> str:
    """ "pcie.link.gen.max (no such column), ..." for messages."""
    why = {"missing": "no such column", "unreadable": "nvidia-smi printed N/A or an error"}
    return ", ".join(f"{field} ({why[state]})" for field, state in unread.items())
