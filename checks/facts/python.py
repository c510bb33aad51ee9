"""Facts of Python on the host: its version, the virtualenvs, the packages in one."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.files import (
    parse_venvs_by_age,
)
from pyinfra_sglang.parsers.system import (
    parse_python_packages,
    parse_python_version,
)


class PythonPackages(FactBase[dict[str, str]]):
    """Distributions installed in a virtualenv, {normalized name: version}, read from its
    *.dist-info folders (works for uv venvs, which have no pip); {} when there is no venv."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self, venv: str) -> str:
        return (
            f"ls -d {shlex.quote(venv)}/lib/python*/site-packages/*.dist-info 2>/dev/null || true"
        )

    def process(self, output) -> dict[str, str]:
        return parse_python_packages(output)


class PythonVersion(FactBase[str | None]):
    """``X.Y.Z`` of the python at ``path``; None when there is none."""

    def command(self, path: str) -> str:
        return f"test -x {shlex.quote(path)} && {shlex.quote(path)} --version 2>&1 || true"

    def process(self, output) -> str | None:
        return parse_python_version(output)


class Virtualenvs(FactBase[list[str]]):
    """The virtualenvs in the folder ``root`` (each holds a pyvenv.cfg), newest first by when
    that file was written (the venv's creation); [] when there are none."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self, root: str) -> str:
        return (
            f"for d in {shlex.quote(root.rstrip('/'))}/*/; do "
            '[ -f "$d/pyvenv.cfg" ] && stat -c \'%Y %n\' "$d/pyvenv.cfg"; done 2>/dev/null '
            "| sort -rn || true"
        )

    def process(self, output) -> list[str]:
        return parse_venvs_by_age(output)
