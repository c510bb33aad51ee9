"""Load the project's data files (pyinfra_sglang/data/*.toml) once."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.resources import files
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """Return the parsed TOML data file ``name`` (without extension)."""
    text = files("pyinfra_sglang").joinpath("data", f"{name}.toml").read_text()
    return tomllib.loads(text)
