"""The inventory reference of docs/inventory.md, generated from the configuration's field
groups: one table per role."""

from __future__ import annotations

from typing import Any

from pyinfra_sglang.config import FIELD_GROUPS, field_allowed
from pyinfra_sglang.doc_markers import replace_block


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
    """The inventory reference of docs/inventory.md: one table per field group (the role
    that reads the fields, config/fields/), in the configuration's order."""
    sections = []
    for group in FIELD_GROUPS:
        title = (group.__doc__ or group.__name__).strip().splitlines()[0].rstrip(".")
        path = group.__module__.replace(".", "/") + ".py"
        rows = [
            f"### {title}",
            "",
            f"Fields of `{group.__name__}`, {path}:",
            "",
            "| field | default | allowed | what it sets |",
            "| --- | --- | --- | --- |",
        ]
        for name, info in group.model_fields.items():
            # get_default: list fields have a default_factory, whose value is the default shown.
            default = _format_default(info.get_default(call_default_factory=True))
            rows.append(f"| `{name}` | {default} | {field_allowed(name)} | {info.description} |")
        sections.append("\n".join(rows) + "\n")
    return "\n".join(sections)
