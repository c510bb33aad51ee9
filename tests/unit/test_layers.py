"""The layers import one way: core pyinfra_sglang/ <- checks/ <- roles/ <- deploy/. Programs
shipped to hosts import only the standard library (plus what their docstring allows).

Both read the source with ast, so a lazy import inside a function counts as much as one at
the top of a module."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Lower index = lower layer; a module may import its own layer and those below it.
LAYERS = ("pyinfra_sglang", "checks", "roles", "deploy")
HOST_PROGRAMS = ROOT / "pyinfra_sglang" / "host_programs"
# Third-party modules a host program may use when its docstring names them.
ALLOWED_BY_DOCSTRING = ("pynvml", "torch", "huggingface_hub")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file; relative imports resolved
    against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.append((node.lineno, f"{base}.{node.module}" if node.module else base))
            else:
                found.append((node.lineno, node.module))
    return found


def layer_of(module: str) -> str | None:
    top = module.split(".", 1)[0]
    return top if top in LAYERS else None


def upward_imports(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        own = LAYERS.index(path.relative_to(ROOT).parts[0])
        for line, module in imported_modules(path):
            layer = layer_of(module)
            if layer is not None and LAYERS.index(layer) > own:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({layer})")
    return problems


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_no_layer_imports_a_layer_above_it():
    assert upward_imports(python_files(*LAYERS)) == []


def test_the_layer_check_fails_on_an_upward_import(tmp_path, monkeypatch):
    # The check itself must be able to fail: a core module importing checks/ is caught.
    fake_root = tmp_path / "repo"
    core = fake_root / "pyinfra_sglang"
    core.mkdir(parents=True)
    (core / "bad.py").write_text("def f():\n    from checks.facts import NvidiaGpus\n")
    (fake_root / "roles").mkdir()
    (fake_root / "roles" / "fine.py").write_text("from checks import facts\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    found = upward_imports([core / "bad.py", fake_root / "roles" / "fine.py"])
    assert found == ["pyinfra_sglang/bad.py:2 imports checks.facts (checks)"]


def host_program_problems(path: Path) -> list[str]:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    siblings = {p.stem for p in HOST_PROGRAMS.glob("*.py")}
    problems = []
    for line, module in imported_modules(path):
        top = module.split(".", 1)[0]
        if module.startswith("pyinfra_sglang.host_programs."):
            top = module.rsplit(".", 1)[1]  # a relative import of a sibling program
        if top in sys.stdlib_module_names or top in siblings or top == "__future__":
            continue
        if top in ALLOWED_BY_DOCSTRING and top in docstring:
            continue
        problems.append(f"{path.name}:{line} imports {module}")
    return problems


@pytest.mark.parametrize(
    "program", sorted(p.name for p in HOST_PROGRAMS.glob("*.py") if p.name != "__init__.py")
)
def test_host_programs_import_only_the_standard_library(program):
    assert host_program_problems(HOST_PROGRAMS / program) == []


def test_the_host_program_check_fails_on_a_project_import(tmp_path, monkeypatch):
    bad = HOST_PROGRAMS / "decode_client.py"
    text = bad.read_text().replace("import argparse\n", "import argparse\nimport pyinfra\n", 1)
    copy = tmp_path / "decode_client.py"
    copy.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path.parent)
    assert any("imports pyinfra" in problem for problem in host_program_problems(copy))


def test_served_benchmark_ships_only_the_sampler_the_key_reader_and_the_driver():
    from checks.served_benchmark import PROGRAMS

    assert sorted(PROGRAMS) == ["api_key.py", "bench_driver.py", "gpu_sampler.py"]
