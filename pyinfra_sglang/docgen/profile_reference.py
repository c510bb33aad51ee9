"""The profile reference of docs/profiles.md, generated from the Profile model: every key a
profile file takes, its default and what it sets; then the keys an [arch.*] table takes."""

from __future__ import annotations

from typing import Any

from pyinfra_sglang.model_shape.profile_values import IDENTITY_FIELDS, SIZE_FIELDS
from pyinfra_sglang.serving.profiles import ARCH_FIELDS, Profile

# Not keys of the file: the name is the file's, the source its path.
NOT_KEYS = ("name", "source")


def _default(info: Any) -> str:
    value = info.get_default(call_default_factory=True)
    if info.is_required():
        return "required"
    if value is None or value in ("", {}, []):
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def profile_reference_markdown() -> str:
    rows = [
        "| key | default | read from the model's files | what it sets |",
        "| --- | --- | --- | --- |",
    ]
    for name, info in Profile.model_fields.items():
        if name in NOT_KEYS:
            continue
        sized = "size" if name in SIZE_FIELDS else "identity" if name in IDENTITY_FIELDS else ""
        rows.append(f"| `{name}` | {_default(info)} | {sized} | {_cell(info.description or '')} |")
    arch = ", ".join(f"`{name}`" for name in ARCH_FIELDS)
    return "\n".join(rows) + f"\n\nAn `[arch.sm_NNN]` table takes: {arch}.\n"
