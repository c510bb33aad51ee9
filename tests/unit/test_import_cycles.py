"""No import cycle inside the core (pyinfra_sglang/): its modules form a hierarchy, so each
can be read, tested and imported on its own.

The graph is read from the source with ast, so an import inside a function counts as much as
one at the top of a module (a lazy import only hides a cycle, it does not remove it).
Relative imports are resolved, and ``from pkg import module`` is an edge to the module.
Imports under ``if TYPE_CHECKING:`` count too: a type one module names in its annotations
ties it to the other as much as a call does (to read, to move, to test), and an annotation
cycle is one ``from __future__`` away from an import-time one.

The graph cannot see one runtime edge: importing ``pkg.module`` runs ``pkg/__init__.py``
first. tests/build/check_imports.py (CI's lint stage, scripts/build_checks.sh) imports every
module in a fresh interpreter on its own, which fails where that order matters (a name taken
from a module that is only half imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = "pyinfra_sglang"


def core_modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the core; a package is named by its
    __init__.py."""
    modules = {}
    for path in sorted((ROOT / CORE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _import_nodes(tree: ast.AST):
    """Every import statement, at any depth (in functions, classes and ``if`` blocks)."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def imported(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the text of ``module``) imports."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import name`: pkg itself, and pkg.name where name is a module.
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in known and name != module}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = core_modules()
    known = set(modules)
    return {
        name: imported(path.read_text(), name, path.name == "__init__.py", known)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_sees_lazy_relative_type_only_and_module_imports():
    known = {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "import p.a\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n"
        "    from p import f\n"
        "def later():\n"
        "    from .c import thing\n"
        "    from p.d import other\n"
        "class K:\n"
        "    def method(self):\n"
        "        from p import e\n"
    )
    assert imported(source, "p.x", False, known) == {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_has_no_import_cycle():
    graph = import_graph()
    assert "pyinfra_sglang.serving.render" in graph  # the walk found the core
    found = cycles(graph)
    assert not found, "import cycles inside the core:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in found
    )


# Inside the core, measurement (audit, diagnosis, served_benchmark, tuning, report) sits above
# the decisions it measures: the serving core, the host-side decisions, the inventory model,
# the parsers and the shared floor never import it (the CLI and docgen, at the top, may).
MEASUREMENT = ("audit", "diagnosis", "served_benchmark", "tuning", "report")
# The host-side decisions, by concern: driver, Python env, model files, GPU links, network.
HOST_DECISIONS = ("driver", "python_env", "model_files", "gpu_links", "network", "access")
BELOW_MEASUREMENT = ("serving", *HOST_DECISIONS, "config", "inventory", "parsers")


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "(root)"


def test_measurement_sits_above_what_it_measures():
    graph = import_graph()
    measurement = {f"{CORE}.{name}" for name in MEASUREMENT}
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if _package(module) in BELOW_MEASUREMENT
        or (_package(module) == "(root)" and module != f"{CORE}.cli")
        for target in targets
        if any(target == m or target.startswith(m + ".") for m in measurement)
    )
    assert any(_package(m) == "serving" for m in graph)  # the walk found the packages
    assert not upward, "upward imports inside the core:\n" + "\n".join(upward)


# The configuration sits on its own floor: it reads the shared floor, the parsers and the
# host-side decisions; serving, monitoring and measurement read it; the inventory (loading,
# validation, which renders the service) sits above them all.
FLOORS_ABOVE = {
    **{name: ("config", "serving", "monitoring", "inventory") for name in HOST_DECISIONS},
    "config": ("serving", "monitoring", "inventory", "docgen", "cli", *MEASUREMENT),
    "serving": ("monitoring", "inventory", "docgen", "cli"),
    "monitoring": ("inventory", "docgen", "cli"),
}


def imports_above(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a package of FLOORS_ABOVE into a package it must not read."""
    found = []
    for module, targets in graph.items():
        above = FLOORS_ABOVE.get(_package(module), ())
        for target in targets:
            if target.removeprefix(f"{CORE}.").split(".")[0] in above:
                found.append(f"{module} imports {target}")
    return sorted(found)


def test_the_configuration_floor_imports_only_below_it():
    graph = import_graph()
    assert f"{CORE}.config.host_config" in graph  # the walk found the floor
    found = imports_above(graph)
    assert not found, "imports above their floor:\n" + "\n".join(found)


def test_the_floor_check_fails_on_an_import_up():
    graph = {
        f"{CORE}.serving.render": {f"{CORE}.config.host_config"},
        f"{CORE}.config.host_config": {f"{CORE}.serving.profiles"},
    }
    assert imports_above(graph) == [f"{CORE}.config.host_config imports {CORE}.serving.profiles"]
