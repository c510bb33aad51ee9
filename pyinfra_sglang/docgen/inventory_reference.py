"""The inventory reference of docs/inventory.md, generated from the model's fields."""

from __future__ import annotations

from typing import Any

from pyinfra_sglang.docgen.doc_markers import replace_block
from pyinfra_sglang.inventory.model import HostConfig, field_allowed


def _format_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`"


def with_reference(text: str) -> str:
    """``text`` (docs/inventory.md) with its generated inventory reference block, between its
    ``inventory-reference`` markers, brought up to date."""
    return replace_block(text, "inventory-reference", reference_markdown())


def reference_markdown() -> str:
    """The inventory reference table in docs/inventory.md, generated from the model."""
    rows = [
        "| field | default | allowed | what it sets |",
        "| --- | --- | --- | --- |",
    ]
    for name, info in HostConfig.model_fields.items():
        # get_default: list fields have a default_factory, whose value is the default shown.
        default = _format_default(info.get_default(call_default_factory=True))
        rows.append(f"| `{name}` | {default} | {field_allowed(name)} | {info.description} |")
    return "\n".join(rows) + "\n"
