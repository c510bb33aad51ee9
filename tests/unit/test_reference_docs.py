"""Reference tables in docs/ are generated from code (pyinfra_sglang/docgen/reference_docs.py), and
the finding code registry (pyinfra_sglang/audit/codes.py) names exactly the codes the product
emits.

Emitted codes are read from the source with ast: every ``Finding(level, code, ...)`` call in
pyinfra_sglang/, checks/, roles/ and deploy/ must give its code as a string literal (no code
is built from data files), so the walk sees them all.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyinfra_sglang import inventory
from pyinfra_sglang.audit.codes import CODES, codes_markdown
from pyinfra_sglang.audit.findings import LEVELS
from pyinfra_sglang.cli import COMMANDS
from pyinfra_sglang.docgen import reference_docs
from pyinfra_sglang.docgen.reference_docs import block, cli_markdown, replace_block
from pyinfra_sglang.docgen.role_reference import (
    first_sentence,
    operations_markdown,
    parse_docstring,
    roles_markdown,
    site_modules,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PRODUCT = ("pyinfra_sglang", "checks", "roles", "deploy")


@dataclass
class Emitted:
    # code -> the levels given as literals
    levels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # codes emitted somewhere with a level computed at run time
    dynamic_level: set[str] = field(default_factory=set)
    # "file:line" of calls whose code is not a string literal
    unreadable: list[str] = field(default_factory=list)


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == name), None)


def read_emitted(source: str, where: str, emitted: Emitted) -> None:
    """Add the codes of every ``Finding(...)`` call in ``source`` to ``emitted``."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "Finding":
            continue
        if not node.args and all(k.arg is None for k in node.keywords):
            continue  # Finding(**as_dict): a finding read back, not emitted
        code = _literal(_argument(node, 1, "code"))
        if code is None:
            emitted.unreadable.append(f"{where}:{node.lineno}")
            continue
        level = _literal(_argument(node, 0, "level"))
        if level is None:
            emitted.dynamic_level.add(code)
        else:
            emitted.levels[code].add(level)


@pytest.fixture(scope="module")
def emitted() -> Emitted:
    found = Emitted()
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            read_emitted(path.read_text(), str(path.relative_to(ROOT)), found)
    return found


def test_the_source_walk_reads_literal_and_computed_levels():
    found = Emitted()
    source = (
        "Finding('fail', 'a-code', 'm')\n"
        "Finding(level, 'b-code', 'm')\n"
        "Finding(level='ok', code='c-code', message='m')\n"
        "findings.Finding('warn', name, 'm')\n"
        "Finding(**data)\n"
    )
    read_emitted(source, "x.py", found)
    assert dict(found.levels) == {"a-code": {"fail"}, "c-code": {"ok"}}
    assert found.dynamic_level == {"b-code"}
    assert found.unreadable == ["x.py:4"]


def test_every_finding_code_is_a_string_literal(emitted):
    assert not emitted.unreadable, (
        "Finding codes must be string literals, so the registry check can read them: "
        + ", ".join(emitted.unreadable)
    )


def test_every_emitted_code_is_registered(emitted):
    codes = set(emitted.levels) | emitted.dynamic_level
    assert "driver-drift" in codes and "compute-bound" in codes  # the walk saw the source
    missing = sorted(codes - set(CODES))
    assert not missing, f"emitted but missing from pyinfra_sglang/audit/codes.py: {missing}"


def test_every_registered_code_is_emitted(emitted):
    codes = set(emitted.levels) | emitted.dynamic_level
    stale = sorted(set(CODES) - codes)
    assert not stale, f"in pyinfra_sglang/audit/codes.py but emitted nowhere: {stale}"


def test_registered_levels_are_the_emitted_levels(emitted):
    for code, entry in CODES.items():
        assert entry.levels and set(entry.levels) <= set(LEVELS), code
        literal = emitted.levels.get(code, set())
        assert literal <= set(entry.levels), f"{code} is emitted at {sorted(literal)}"
        if code not in emitted.dynamic_level:
            assert literal == set(entry.levels), f"{code} is emitted at {sorted(literal)} only"


def _stale_message(path: Path) -> str:
    command = "uv run python -m pyinfra_sglang.docgen.reference_docs"
    return f"{path.relative_to(ROOT)} is stale: run `{command}`"


@pytest.mark.parametrize(
    ("file_name", "name", "generate"),
    [
        ("audit.md", "finding-codes", codes_markdown),
        ("cli.md", "cli", cli_markdown),
        ("inventory.md", "inventory-reference", inventory.reference_markdown),
        ("packaging.md", "offline-commands", reference_docs.command_names_markdown),
        ("roles.md", "roles", roles_markdown),
        ("roles.md", "role-operations", operations_markdown),
        ("roles.md", "platforms", reference_docs.platforms_markdown),
    ],
)
def test_docs_hold_the_generated_tables(file_name, name, generate):
    path = DOCS / file_name
    text = path.read_text()
    assert block(text, name) is not None, f"{path} lacks the {name} markers"
    assert block(text, name) == generate(), _stale_message(path)


def test_every_subcommand_and_code_is_in_the_tables():
    table = cli_markdown()
    assert all(f"| `{command.name}` |" in table for command in COMMANDS)
    assert "`--data KEY=VALUE` (repeatable)" in table
    assert "`--a DIR [DIR ...]` (required)" in table
    codes = codes_markdown()
    assert all(f"| `{code}` |" in codes for code in CODES)


def test_replace_block_replaces_only_between_the_markers():
    text = "head\n<!-- x:start -->\nold\n<!-- x:end -->\ntail\n"
    assert replace_block(text, "x", "new") == "head\n<!-- x:start -->\nnew\n<!-- x:end -->\ntail\n"
    assert block(text, "x") == "old\n" and block(text, "y") is None
    with pytest.raises(ValueError):
        replace_block("no markers\n", "x", "new")


def test_write_and_check_regenerate_a_stale_docs_folder(tmp_path):
    for file_name, _ in reference_docs.BLOCKS.values():
        (tmp_path / file_name).write_text((DOCS / file_name).read_text())
    assert reference_docs.main(["--check", "--docs-dir", str(tmp_path)]) == 0

    audit = tmp_path / "audit.md"
    audit.write_text(replace_block(audit.read_text(), "finding-codes", "| stale |\n"))
    assert reference_docs.stale_reference_docs(tmp_path) == [audit]
    assert reference_docs.main(["--check", "--docs-dir", str(tmp_path)]) == 1
    assert reference_docs.write_reference_docs(tmp_path) == [audit]
    assert audit.read_text() == (DOCS / "audit.md").read_text()
    assert reference_docs.main(["--check", "--docs-dir", str(tmp_path)]) == 0


def test_inventory_reference_write_on_a_file_without_markers_says_so(tmp_path, capsys):
    from pyinfra_sglang.cli import main

    target = tmp_path / "notes.md"
    target.write_text("# notes\n")
    assert main(["inventory-reference", "--write", str(target)]) == 2
    assert "inventory-reference: cannot update" in capsys.readouterr().err
    assert target.read_text() == "# notes\n"


def test_pyinfra_docstring_format_gives_summary_and_arguments():
    doc = parse_docstring(
        """Reboot now and wait
        until the host is back.

        + timeout: seconds the host has
          to come back
        + interval: seconds between tries

        Later prose is no argument.
        """
    )
    assert doc.summary == "Reboot now and wait until the host is back."
    assert doc.arguments == {
        "timeout": "seconds the host has to come back",
        "interval": "seconds between tries",
    }
    assert parse_docstring(None).summary == "" and parse_docstring("One line.").arguments == {}


def test_the_roles_table_follows_site_py_and_every_role_says_what_it_does():
    modules = site_modules()
    assert modules[:3] == ["roles.base", "roles.nvidia_repo", "roles.nvidia_driver"]
    assert "roles.reboot" in modules  # imported by a role: its operation runs alone too
    text = roles_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| [`roles/")]
    assert rows[0] == (
        "| [`roles/base.py`](#rolesbasepy-base) | Refuses unsupported platforms (those of "
        "data/platforms.toml) before any host changes. |"
    )
    assert rows[-1].startswith("| [`roles/sglang_service.py`](#rolessglang_servicepy-sglang-")
    # A deploy without a docstring would leave an empty cell: every role says what it does.
    assert all(not row.endswith("|  |") for row in rows), rows
    # Each row's link leads to a section holding the role's whole docstring, paragraphs kept.
    assert "### roles/base.py (Base)\n\nRefuses unsupported platforms" in text
    assert text.count("\n### roles/") == len(rows)
    assert max(len(row) for row in rows) < 800  # the table stays a summary (was 2,600)


def test_first_sentence_ends_outside_brackets_and_code():
    assert first_sentence("uv (`/opt/uv`; no curl). Then more.") == "uv (`/opt/uv`; no curl)."
    assert first_sentence("Install a, e.g. b; then c.") == "Install a, e.g. b."
    assert first_sentence("Runs `a. b` then stops") == "Runs `a. b` then stops"
    assert first_sentence("Version 3.10 works. Rest.") == "Version 3.10 works."


def test_operations_show_their_arguments_with_the_docstring_lines():
    table = operations_markdown()
    reboot = next(line for line in table.splitlines() if "roles.reboot.reboot_and_wait" in line)
    assert "`timeout=1800`: seconds the host has to come back" in reboot
    assert "`interval=2`: seconds between tries to reconnect" in reboot
    assert "| `roles.base.kernel_headers` | Install the headers DKMS needs" in table


def test_platforms_and_commands_are_generated_not_typed():
    platforms = reference_docs.platforms_markdown()
    assert (
        "| `debian` | 12 | `debian12` |" in platforms
        and "`aarch64` (NVIDIA's folder `sbsa`)" in platforms
    )
    commands = reference_docs.command_names_markdown()
    assert commands.split(", ") == [f"`{c.name}`" for c in COMMANDS[:-1]] + [
        f"`{COMMANDS[-1].name}`\n"
    ]
    assert "`packages`" in commands  # the command the hand-kept lists had missed
    # The hand-typed lists are gone: README links to the generated ones.
    readme = (ROOT / "README.md").read_text()
    assert "Ubuntu 22.04/24.04 or Debian 12" not in readme
    assert "`diagnose`, `ab-compare`, `report`, `inventory-reference`" not in readme
    assert "docs/roles.md#supported-platforms" in readme
