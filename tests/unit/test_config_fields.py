"""The configuration is one field group per role, composed into one flat HostConfig: each
field is declared in one group only, HostConfig itself declares none, and every group is
composed (config/host_config.py)."""

from __future__ import annotations

import ast
import inspect

import pytest
from pydantic import BaseModel

from pyinfra_sglang.config import FIELD_GROUPS, HostConfig
from pyinfra_sglang.config.types import FieldGroup


def declared_fields(cls: type) -> list[str]:
    """The fields a class declares in its own body (annotated names), read from its source."""
    tree = ast.parse(inspect.getsource(cls).lstrip())
    body = tree.body[0].body  # type: ignore[attr-defined]
    return [
        node.target.id
        for node in body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]


def fields_declared_twice(groups) -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for group in groups:
        for name in declared_fields(group):
            owners.setdefault(name, []).append(group.__name__)
    return {name: where for name, where in owners.items() if len(where) > 1}


def test_no_field_is_declared_twice():
    assert fields_declared_twice(FIELD_GROUPS) == {}


def test_the_check_finds_a_field_declared_twice():
    class Once(FieldGroup):
        sglang_port: int = 1

    class Twice(FieldGroup):
        sglang_port: int = 2

    assert fields_declared_twice([Once, Twice]) == {"sglang_port": ["Once", "Twice"]}


def test_host_config_is_the_groups_and_nothing_more():
    # HostConfig holds the rules across groups, no field of its own.
    assert declared_fields(HostConfig) == []
    grouped = [name for group in FIELD_GROUPS for name in group.model_fields]
    assert sorted(grouped) == sorted(HostConfig.model_fields)
    # Every group is composed, each one once; the bases are the groups, reversed for order.
    assert tuple(reversed(HostConfig.__bases__)) == FIELD_GROUPS
    # ... and the fields come out in the groups' order (docs/inventory.md's order).
    assert list(HostConfig.model_fields) == grouped


@pytest.mark.parametrize("group", FIELD_GROUPS, ids=lambda group: group.__name__)
def test_each_group_is_a_field_group_with_its_own_fields(group):
    assert issubclass(group, FieldGroup) and issubclass(group, BaseModel)
    assert list(group.model_fields) == declared_fields(group)
    assert group.model_config["extra"] == "forbid" and group.model_config["frozen"]
    # A group's text says what it is: the docs' table titles come from it.
    assert group.__doc__ and group.__doc__.strip()
