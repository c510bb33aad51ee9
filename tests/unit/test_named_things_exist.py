"""Issue 47 (advice that exists): every file of this repository and every pyinfra-sglang
command that advice, docs, templates and rendered headers name exists. A name that moved
would send a user to nothing (the unit headers named pyinfra_sglang/render.py for months
after it moved to serving/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
TOP = ("pyinfra_sglang", "roles", "checks", "deploy", "templates", "bench", "docs", "tests")
TOP += ("inventories", "scripts", ".ci")
PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(map(re.escape, TOP))})/[\w./-]*\w)(\.?\*)?")
# What names the repository's files: the product, its docs, data, templates, examples. The
# changelog names what was, and stays as written.
SOURCES = (
    "templates/*",
    "docs/*.md",
    "README.md",
    "pyinfra_sglang/**/*.py",
    "pyinfra_sglang/data/*.toml",
    "roles/*.py",
    "checks/*.py",
    "deploy/*.py",
    "inventories/**/*.py",
    "bench/*.py",
)
SKIPPED = {"docs/changelog.md"}
# Names of files in other projects' repositories, or a placeholder, with where they are.
NOT_OURS = {
    "docs/concepts/security/authentication.md": "smg's docs (sgl-project/sgl-model-gateway)",
    "docs/getting-started/index.md": "smg's docs (sgl-project/sgl-model-gateway)",
    "docs/advanced_features/sgl_model_gateway.md": "SGLang's docs (sgl-project/sglang)",
    "tests/unit/test_x.py": "bench/suite_times.py: a placeholder in a comment",
}
# A command as a user types it: in a code span, or at the start of a line of a code block.
COMMAND = re.compile(r"`(?:uv run )?pyinfra-sglang ([a-z][a-z-]*)")
BLOCK_COMMAND = re.compile(r"^[ \t]*(?:\$ )?(?:uv run )?pyinfra-sglang ([a-z][a-z-]*)", re.M)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def _sources() -> list[Path]:
    found = {path for pattern in SOURCES for path in ROOT.glob(pattern) if path.is_file()}
    return sorted(p for p in found if str(p.relative_to(ROOT)) not in SKIPPED)


def _exists(name: str, glob: bool) -> bool:
    if glob:
        folder, _, prefix = name.rpartition("/")
        return any(p.name.startswith(prefix) for p in (ROOT / folder).glob("*"))
    if (ROOT / name).exists() or (ROOT / f"{name}.py").exists():
        return True
    # module.attribute (checks/facts/gpu_health.DcgmDiag): the module is the file.
    module, dot, _ = name.rpartition(".")
    return bool(dot) and (ROOT / f"{module}.py").is_file()


def named_paths() -> dict[str, set[str]]:
    """{path named: the files naming it}."""
    named: dict[str, set[str]] = {}
    for source in _sources():
        for match in PATH.finditer(source.read_text(errors="replace")):
            name = match.group(1).rstrip(".")
            key = name + (match.group(2) or "")
            named.setdefault(key, set()).add(str(source.relative_to(ROOT)))
    return named


def test_every_file_named_exists():
    named = named_paths()
    assert len(named) > 200  # the scan reads what it should (259 names)
    missing = {
        name: sorted(where)
        for name, where in named.items()
        if name.rstrip("*") not in NOT_OURS and not _exists(name.rstrip("*"), name.endswith("*"))
    }
    assert not missing, missing


def test_the_names_of_other_projects_are_still_named_where_said():
    # An entry nobody names any more goes: the list holds only what is needed.
    named = named_paths()
    assert set(NOT_OURS) <= set(named), set(NOT_OURS) - set(named)


def test_every_command_named_exists():
    commands = {command.name for command in COMMANDS}
    found: dict[str, set[str]] = {}
    for source in _sources():
        text = source.read_text(errors="replace")
        blocks = [block.group(1) for block in FENCE.finditer(text)]
        matches = [*COMMAND.finditer(text), *(m for b in blocks for m in BLOCK_COMMAND.finditer(b))]
        for match in matches:
            found.setdefault(match.group(1), set()).add(str(source.relative_to(ROOT)))
    assert {"render", "analyze", "validate", "diagnose"} <= set(found)
    unknown = {name: sorted(where) for name, where in found.items() if name not in commands}
    assert not unknown, unknown


HEADER = re.compile(r"Managed by pyinfra-sglang \(([^)]+?)\)")
HEADED = sorted(p for p in (ROOT / "templates").glob("*.j2") if HEADER.search(p.read_text()))


def test_the_service_templates_carry_a_managed_header():
    names = {p.name for p in HEADED}
    assert {"sglang.service.j2", "sglang.env.j2", "sglang-config.yaml.j2"} <= names


@pytest.mark.parametrize("template", HEADED, ids=lambda p: p.name)
def test_each_managed_header_names_the_file_that_writes_it(template):
    writer = HEADER.search(template.read_text()).group(1).split(":")[0].strip()
    assert (ROOT / writer).is_file(), f"{template.name} names {writer}"
