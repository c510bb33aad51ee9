"""The roles reference in docs/roles.md, generated from the roles' own docstrings: what each
deploy of deploy/site.py does (its docstring), and every operation with its arguments, written
in pyinfra's docstring format (pyinfra/operations/*.py)::

    Summary paragraphs.

    + argument: what it means
      (continued, indented)

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


@dataclass(frozen=True)
class Docstring:
    summary: str  # the paragraphs before the first "+ argument:" line, joined into one
    arguments: dict[str, str] = field(default_factory=dict)
    paragraphs: tuple[str, ...] = ()  # the same paragraphs, each on one line


@dataclass(frozen=True)
class RoleFunction:
    module: str  # "roles.base"
    name: str
    kind: str  # "deploy" or "operation"
    title: str | None  # @deploy("Title")
    signature: list[str]  # "name", "name=default"
    doc: Docstring


def first_sentence(text: str) -> str:
    """The first sentence (or clause before a semicolon) of ``text``, with its full stop: a
    ". " or "; " outside brackets and backquotes, after a word ("e.g. " ends none)."""
    depth, quoted = 0, False
    for index, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth = max(depth - 1, 0)
        elif (
            char in ".;"
            and not quoted
            and depth == 0
            and text[index + 1 : index + 2] in (" ", "")
            and not text[:index].endswith(("e.g", "i.e"))
        ):
            return text[:index] + "."
    return text


def parse_docstring(text: str | None) -> Docstring:
    """pyinfra's format: summary paragraphs, then ``+ name: text`` lines, each continued by
    the non-blank lines that follow it and do not start another."""
    lines = (text or "").splitlines()
    summary: list[str] = []
    arguments: dict[str, str] = {}
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
    paragraphs = tuple(
        " ".join(block.split()) for block in "\n".join(summary).split("\n\n") if block.strip()
    )
    return Docstring(" ".join(" ".join(summary).split()), arguments, paragraphs)


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


def roles_markdown(root: Path = ROOT) -> str:
    """The deploys deploy/site.py runs, in its order: a table of each one's first sentence,
    then a section per role with its whole docstring."""
    rows = ["| role | what it does |", "| --- | --- |"]
    sections = []
    for module in site_modules(root):
        for function in module_functions(module, root):
            if function.kind != "deploy":
                continue
            path = _path(module)
            heading = f"{path} ({function.title})" if function.title else path
            rows.append(
                f"| [`{path}`](#{_anchor(heading)}) "
                f"| {_cell(first_sentence(function.doc.summary))} |"
            )
            sections.append(f"### {heading}\n\n" + "\n\n".join(function.doc.paragraphs))
    return "\n".join(rows) + "\n\n" + "\n\n".join(sections) + "\n"


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
