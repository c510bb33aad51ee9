"""What every data file's model shares: frozen, no unknown key; releases read as releases;
tables keyed by name."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from pyinfra_sglang.versions import Version, parse_version

# int stays int and float stays float (smart union): values keep the type TOML gave them.
Number = int | float


def _release(text: str) -> str:
    parse_version(text)
    return text


@cache
def optional_version(text: str | None) -> Version | None:
    return parse_version(text) if text is not None else None


# An SGLang (or router) release, "0.5.17": checked readable, kept as written.
Release = Annotated[str, AfterValidator(_release)]


class DataModel(BaseModel):
    """The base of every data file's model: frozen, no unknown key."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def named_by_key(tables: Any) -> Any:
    """Tables keyed by name, each given its key as ``name``: the file does not write it."""
    if not isinstance(tables, dict):
        return tables
    named = {}
    for key, table in tables.items():
        if isinstance(table, dict):
            if table.get("name", key) != key:
                raise ValueError(f"{key}: name {table['name']!r} is not the table's key")
            table = {**table, "name": key}
        named[key] = table
    return named
