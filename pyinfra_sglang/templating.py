"""The one Jinja environment of the project's templates (templates/): the service's and the
monitoring host's files render with the same settings, so every template keeps its trailing
newline, fails on an undefined name and escapes nothing by itself (each value is escaped
for its file before it is passed in, or with the ``quoted`` filter)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jinja2

from pyinfra_sglang import paths


def yaml_quoted(value: Any) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is one), non-ASCII kept: the
    ``quoted`` filter."""
    return json.dumps(str(value), ensure_ascii=False)


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["quoted"] = yaml_quoted
    return env


def render_template(name: str, **context: Any) -> str:
    """templates/``name`` rendered with ``context``."""
    return environment().get_template(name).render(**context)
