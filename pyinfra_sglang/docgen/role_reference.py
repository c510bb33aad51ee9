"""The roles reference in docs/roles.md, generated from the roles' own docstrings: a table of
the deploys deploy/site.py runs, each with its summary and the inventory fields it reads, and
a table of every operation with its arguments. The docstrings are written in pyinfra's format
(pyinfra/operations/*.py)::

    One-line summary.

    A few sentences.

    + argument: what it means (for a deploy: an inventory field it reads)
      (continued, indented)

and kept short (``MAX_DOCSTRING``): the narrative of each role, what it does and why, is the
hand-written section of docs/roles.md the table links to (``role_heading``).
tests/unit/test_reference_docs.py fails on a docstring ``docstring_problems`` finds fault with.

The roles are read with ast, not imported: the core sits below roles/ (tests/unit/test_layers.py)
and the reference must not run a deploy's imports.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = "deploy/site.py"
# A role's docstring stays a summary: about 600 characters, never more than this.
MAX_DOCSTRING = 700


@dataclass(frozen=True)
class Docstring:
    summary: str  # the paragraphs before the first "+ argument:" line, joined into one
    arguments: dict[str, str] = field(default_factory=dict)
    paragraphs: tuple[str, ...] = ()  # the same paragraphs, each on one line
    first_line: str = ""  # the docstring's first line, pyinfra's one-line summary
    length: int = 0  # characters, as ast.get_docstring gives it
    trailing: tuple[str, ...] = ()  # lines after the arguments, which the reference drops


@dataclass(frozen=True)
class RoleFunction:
    module: str  # "roles.base"
    name: str
    kind: str  # "deploy" or "operation"
    title: str | None  # @deploy("Title")
    signature: list[str]  # "name", "name=default"
    doc: Docstring


def parse_docstring(text: str | None) -> Docstring:
    """pyinfra's format: summary paragraphs, then ``+ name: text`` lines, each continued by
    the non-blank lines that follow it and do not start another."""
    lines = (text or "").splitlines()
    summary: list[str] = []
    arguments: dict[str, str] = {}
    trailing: list[str] = []
    current = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("+ ") and ":" in stripped:
            current, _, rest = stripped[2:].partition(":")
            current = current.strip()
            arguments[current] = rest.strip()
        elif current and stripped:
            arguments[current] = f"{arguments[current]} {stripped}".strip()
        elif current:
            current = None
        elif not arguments:
            summary.append(stripped)
        elif stripped:
            trailing.append(stripped)
    paragraphs = tuple(
        " ".join(block.split()) for block in "\n".join(summary).split("\n\n") if block.strip()
    )
    return Docstring(
        " ".join(" ".join(summary).split()),
        arguments,
        paragraphs,
        first_line=lines[0].strip() if lines else "",
        length=len(text or ""),
        trailing=tuple(trailing),
    )


def _decorator(node: ast.FunctionDef) -> tuple[str, str | None] | None:
    """("deploy", its title) or ("operation", None) when ``node`` is one of pyinfra's."""
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
        if name == "deploy":
            title = call.args[0] if call and call.args else None
            return "deploy", title.value if isinstance(title, ast.Constant) else None
        if name == "operation":
            return "operation", None
    return None


def _signature(node: ast.FunctionDef) -> list[str]:
    args = node.args.posonlyargs + node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
    shown = [
        arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}"
        for arg, default in zip(args, defaults)
    ]
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        shown.append(arg.arg if default is None else f"{arg.arg}={ast.unparse(default)}")
    return shown


def module_functions(module: str, root: Path = ROOT) -> list[RoleFunction]:
    """The deploys and operations ``module`` defines, in file order."""
    path = root / Path(*module.split(".")).with_suffix(".py")
    found = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.FunctionDef) or not (kind := _decorator(node)):
            continue
        doc = parse_docstring(ast.get_docstring(node))
        found.append(RoleFunction(module, node.name, kind[0], kind[1], _signature(node), doc))
    return found


def _role_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each ``from roles.x import name`` in ``path``, in file order."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roles."):
            found.extend((node.module, alias.asname or alias.name) for alias in node.names)
    return found


def site_modules(root: Path = ROOT) -> list[str]:
    """The role modules deploy/site.py runs, in the order it calls their deploys, then the
    role modules they import (helpers, operations run alone), by name."""
    site = root / SITE
    module_of = {name: module for module, name in _role_imports(site)}
    order: list[str] = []
    for node in ast.parse(site.read_text()).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = getattr(node.value.func, "id", None)
            if name in module_of and module_of[name] not in order:
                order.append(module_of[name])
    seen, queue = set(order), list(order)
    while queue:
        path = root / Path(*queue.pop(0).split(".")).with_suffix(".py")
        for module, _ in _role_imports(path):
            if module not in seen:
                seen.add(module)
                queue.append(module)
    return order + sorted(seen - set(order))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _path(module: str) -> str:
    return "/".join(module.split(".")) + ".py"


def _anchor(heading: str) -> str:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def role_heading(function: RoleFunction) -> str:
    """The heading of the role's hand-written section in docs/roles.md (without its ``###``),
    which the roles table links to: ``roles/base.py (Base)``."""
    path = _path(function.module)
    return f"{path} ({function.title})" if function.title else path


def site_deploys(root: Path = ROOT) -> list[RoleFunction]:
    """The deploys of the role modules deploy/site.py runs, in its order."""
    return [
        function
        for module in site_modules(root)
        for function in module_functions(module, root)
        if function.kind == "deploy"
    ]


def roles_markdown(root: Path = ROOT) -> str:
    """The table of the deploys deploy/site.py runs, in its order: each one's summary (its
    docstring before the ``+ field:`` lines) and the inventory fields it reads, linked to the
    role's hand-written section further down the page."""
    rows = ["| role | what it does | inventory fields it reads |", "| --- | --- | --- |"]
    for function in site_deploys(root):
        heading = role_heading(function)
        fields = "<br>".join(
            f"`{name}`: {_cell(meaning)}" for name, meaning in function.doc.arguments.items()
        )
        rows.append(
            f"| [`{_path(function.module)}`](#{_anchor(heading)}) "
            f"| {_cell(function.doc.summary)} | {fields or 'none'} |"
        )
    return "\n".join(rows) + "\n"


def missing_sections(text: str, root: Path = ROOT) -> list[str]:
    """The headings of site deploys that ``text`` (docs/roles.md with its generated blocks
    taken out) lacks a hand-written ``### heading`` section for, or has more than one of."""
    return [
        heading
        for function in site_deploys(root)
        if text.count(f"\n### {(heading := role_heading(function))}\n") != 1
    ]


def role_modules(root: Path = ROOT) -> list[str]:
    """Every module under roles/, by name."""
    return sorted(
        f"roles.{path.stem}" for path in (root / "roles").glob("*.py") if path.stem != "__init__"
    )


def docstring_problems(function: RoleFunction, inventory_fields: set[str]) -> list[str]:
    """What keeps ``function``'s docstring from pyinfra's shape: none at all, more than
    ``MAX_DOCSTRING`` characters, a ``+ name:`` line naming no argument of an operation (no
    inventory field, for a deploy), prose after the arguments (the reference drops it); for a
    deploy also a first paragraph that is not a one-line summary ending in a full stop."""
    where = f"{_path(function.module)} {function.name}"
    doc = function.doc
    if not doc.summary:
        return [f"{where}: no docstring summary"]
    problems = []
    if doc.length > MAX_DOCSTRING:
        problems.append(
            f"{where}: docstring of {doc.length} characters, more than {MAX_DOCSTRING}: "
            "move the narrative into docs/roles.md"
        )
    if function.kind == "deploy":
        known, what = inventory_fields, "inventory field"
        if doc.paragraphs[0] != doc.first_line or not doc.first_line.endswith("."):
            problems.append(f"{where}: the first paragraph is not a one-line summary")
    else:
        known = {shown.split("=", 1)[0] for shown in function.signature}
        what = "argument"
    problems.extend(
        f"{where}: + {name}: is no {what}" for name in doc.arguments if name not in known
    )
    if doc.trailing:
        problems.append(f"{where}: text after the + lines: {doc.trailing[0]!r}")
    return problems


def _argument(function: RoleFunction, shown: str) -> str:
    name = shown.split("=", 1)[0]
    text = f"`{shown}`"
    described = function.doc.arguments.get(name)
    return f"{text}: {_cell(described)}" if described else text


def operations_markdown(root: Path = ROOT) -> str:
    """The table of every operation of those role modules: its docstring's summary and its
    arguments, each with its ``+ argument:`` line where the docstring has one."""
    rows = ["| operation | what it does | arguments |", "| --- | --- | --- |"]
    for module in site_modules(root):
        for function in module_functions(module, root):
            if function.kind != "operation":
                continue
            arguments = "<br>".join(_argument(function, shown) for shown in function.signature)
            rows.append(
                f"| `{module}.{function.name}` | {_cell(function.doc.summary)} "
                f"| {arguments or 'none'} |"
            )
    return "\n".join(rows) + "\n"
