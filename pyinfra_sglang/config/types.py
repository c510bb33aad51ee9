"""What every field group of the configuration shares: the types an inventory value may
take, the reference text of a field, and the error a rule across fields raises.

How to add a field:

1. The field goes in the group of the role that reads it (config/fields/), with a working
   default: a host without it must deploy as before. A field is declared in one group only
   (tests/unit/test_config_fields.py).
2. Its type says what is allowed: a pattern, a range (``ge``/``le``), a ``Literal`` from data
   (``DriverBranch``), a ``BeforeValidator`` for what pyinfra's ``--data`` turns into another
   type (``version_text``, ``no_bool``), an ``AfterValidator`` for a rule of its own. A rule
   across the group's fields is a ``model_validator(mode="after")`` in the group that raises
   ``field_error(field, message)``, so the problem names the field; a rule across groups
   goes in ``HostConfig`` (config/host_config.py). A rule that renders the service or reads
   other hosts goes in inventory/semantic_checks.py.
3. Its reference text: ``description=`` (what it sets) and ``json_schema_extra=allowed(...)``
   (what is allowed; the same text every problem about it shows). docs/inventory.md's tables,
   one per group, are generated from them: ``uv run python -m
   pyinfra_sglang.docgen.reference_docs`` rewrites them, tests/unit/test_reference_docs.py
   fails until it is.
4. Tests: a good and a refused value in tests/unit/test_inventory_model.py (or
   test_validation_limits.py for limits), and a test of the role that reads it.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError


class FieldGroup(BaseModel):
    """The base of every field group: unknown keys refused, a validated config unchanging."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def version_text(example: str) -> BeforeValidator:
    """A version field's validator: text kept as text, a number refused with ``example`` (the
    field's default) in the quoted spelling to use."""

    def check(value: Any, info: ValidationInfo) -> Any:
        # pyinfra's --data turns "3.10" into the float 3.1 and "13.10" into 13.1: a version
        # read as a number has lost its trailing zeros, so a number is refused, never guessed.
        field = info.field_name
        if isinstance(value, bool):
            raise ValueError("a version is text, not true/false")
        if isinstance(value, float):
            raise ValueError(
                f"a version must be text, not the number {value!r} (a number loses trailing "
                f"zeros: 3.10 reads as 3.1); quote the value: --data '{field}=\"{example}\"' "
                f'on the command line, {field} = "{example}" in an inventory file'
            )
        return str(value) if isinstance(value, int) else value

    return BeforeValidator(check)


def no_bool(value: Any) -> Any:
    # true/false would pass as 1/0 (--data sglang_port=true is port 1): refuse them.
    if isinstance(value, bool):
        raise ValueError("a number is expected, not true/false")
    return value


def none_if_empty(value: Any) -> Any:
    # An empty path (`--data hf_token_file=`) means "unset", not the current directory.
    return None if isinstance(value, str) and not value.strip() else value


def no_scope(address: IPv4Address | IPv6Address) -> IPv4Address | IPv6Address:
    # Python's IPv6Address takes any text after '%' as a scope id (spaces, quotes, '}', $( )),
    # and every address lands in a unit, an nft file or a config: none takes a zone.
    if isinstance(address, IPv6Address) and address.scope_id is not None:
        raise ValueError(
            f"{address} has a scope id (%{address.scope_id}): give the address without a zone"
        )
    return address


# An IP address without an IPv6 zone: what every address field of the inventory takes.
PlainIP = Annotated[IPv4Address | IPv6Address, AfterValidator(no_scope)]


OptionalPath = Annotated[Path | None, BeforeValidator(none_if_empty)]


Port = Annotated[int, BeforeValidator(no_bool), Field(ge=1, le=65535)]


# Paths on the host that go into units and env files as they are: no quoting needed anywhere.
SAFE_HOST_PATH = r"^/[A-Za-z0-9._/-]+$"


RELEASE_PATTERN = r"^\d+\.\d+\.\d+(\.post\d+)?$"


# NVIDIA driver releases: 590.48.01, 570.26 (three-digit branch, then one or two numbers).
DRIVER_VERSION_PATTERN = r"^\d{3}\.\d+(\.\d+)?$"


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# What a unit's paths may be: systemd refuses a path component over 255 bytes (NAME_MAX)
# and unit settings resolve paths up to PATH_MAX; far below both, a path stays usable.
MAX_HOST_PATH = 1024


MAX_PATH_PART = 255


def path_fits(path: str) -> str:
    if len(path) > MAX_HOST_PATH or any(len(part) > MAX_PATH_PART for part in path.split("/")):
        raise ValueError(
            f"a path of {len(path)} characters, or with a part over {MAX_PATH_PART}: systemd "
            f"refuses such a path in a unit; at most {MAX_HOST_PATH} characters, each part "
            f"at most {MAX_PATH_PART}"
        )
    return path


def apt_line_fits(url: HttpUrl) -> HttpUrl:
    # The URL goes on an apt source line as it is, where '#' starts a comment: the line
    # would lose its suite and apt refuse the whole list.
    if "#" in str(url):
        raise ValueError(
            "a '#' (a URL fragment, or a '#' in the login) cannot stand on an apt source line, "
            "where it starts a comment; write it as %23 inside a path, drop a fragment"
        )
    return url


def allowed(text: str) -> dict[str, str]:
    return {"allowed": text}


def one_of(values) -> str:
    return ", ".join(str(v) for v in values)


def field_error(field: str, message: str) -> PydanticCustomError:
    """A model-level error reported on ``field`` (see _validation_problem)."""
    return PydanticCustomError("host_config", "{message}", {"field": field, "message": message})


def control_characters(value: Any) -> bool:
    if isinstance(value, str):
        return bool(CONTROL_CHARACTERS.search(value))
    if isinstance(value, (list, tuple)):
        return any(control_characters(item) for item in value)
    if isinstance(value, dict):
        return any(control_characters(k) or control_characters(v) for k, v in value.items())
    return False
