"""Reference tables in docs/ are generated from code (pyinfra_sglang/docgen/reference_docs.py), and
the finding code registry (pyinfra_sglang/audit/codes.py) names exactly the codes the product
emits.

Emitted codes are read from the source with ast: every ``Finding(level, code, ...)`` call in
pyinfra_sglang/, checks/, roles/ and deploy/ must give its code as a string literal (no code
is built from data files), so the walk sees them all.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyinfra_sglang.audit.codes import CODES, codes_markdown
from pyinfra_sglang.audit.findings import LEVELS
from pyinfra_sglang.cli.main import COMMANDS
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.config.reference import reference_markdown
from pyinfra_sglang.docgen import reference_docs
from pyinfra_sglang.docgen.reference_docs import block, cli_markdown, replace_block
from pyinfra_sglang.docgen.role_reference import (
    MAX_DOCSTRING,
    RoleFunction,
    docstring_problems,
    missing_sections,
    module_functions,
    operations_markdown,
    parse_docstring,
    role_modules,
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
        (
            "benchmark-and-diagnosis.md",
            "tuning-settings",
            reference_docs.tuning_settings_markdown,
        ),
        ("what-happens.md", "what-happens", reference_docs.what_happens_markdown),
        ("cli.md", "cli", cli_markdown),
        ("inventory.md", "inventory-reference", reference_markdown),
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
    from pyinfra_sglang.cli.main import main

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
    assert modules[:4] == [
        "roles.transfers",
        "roles.base",
        "roles.nvidia_repo",
        "roles.nvidia_driver",
    ]
    assert "roles.reboot" in modules  # imported by a role: its operation runs alone too
    text = roles_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| [`roles/")]
    assert rows[0].startswith("| [`roles/transfers.py`](#rolestransferspy-transfer-folder) |")
    assert rows[1].startswith("| [`roles/base.py`](#rolesbasepy-base) | Refuse an unsupported ")
    # One row a deploy, in site.py's order, each linking to its section's heading.
    paths = [row.split("`")[1] for row in rows]
    assert paths.index("roles/model.py") < paths.index("roles/sglang_service.py")
    assert len(paths) == len(set(paths)) and all(p.startswith("roles/") for p in paths)
    # A deploy without a docstring would leave an empty cell: every role says what it does,
    # and names the inventory fields it reads (its + lines).
    assert all(row.count(" | ") == 2 and "|  |" not in row for row in rows), rows
    driver = next(row for row in rows if "roles/nvidia_driver.py" in row)
    assert "`nvidia_driver_branch`: the branch" in driver and "<br>`allow_reboot`: " in driver
    assert max(len(row) for row in rows) < 1000  # the table stays a summary (was 2,600)


def _headings_and_links(text: str) -> tuple[set[str], list[str]]:
    anchors = {
        re.sub(r"[^a-z0-9 _-]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in text.splitlines()
        if line.startswith("#")
    }
    return anchors, re.findall(r"\]\(#([^)]+)\)", text)


def test_every_role_has_its_hand_written_section_the_table_links_to():
    text = (DOCS / "roles.md").read_text()
    hand_written = text
    for name in ("roles", "role-operations", "platforms"):
        hand_written = replace_block(hand_written, name, "")
    # One section per deploy, outside the generated blocks, so regenerating keeps it.
    assert missing_sections(hand_written) == []
    assert missing_sections(hand_written.replace("\n### roles/model.py (", "\n### x (")) == [
        "roles/model.py (Model weights)"
    ]
    anchors, links = _headings_and_links(text)
    assert "rolesnvidia_driverpy-nvidia-driver" in anchors
    # Every link within the page, the table's included, leads to a heading of it.
    assert links and not [link for link in links if link not in anchors]


@pytest.mark.parametrize("module", role_modules())
def test_role_docstrings_keep_pyinfras_shape(module):
    fields = set(HostConfig.model_fields)
    functions = module_functions(module)
    problems = [p for function in functions for p in docstring_problems(function, fields)]
    assert not problems, "\n".join(problems)


def _function(kind: str, doc: str, signature: tuple[str, ...] = ()) -> RoleFunction:
    return RoleFunction("roles.x", "f", kind, "X", list(signature), parse_docstring(doc))


def test_docstring_problems_name_what_breaks_the_shape():
    fields = {"cuda_version"}
    good = "Install CUDA.\n\nA sentence.\n\n+ cuda_version: the release"
    assert docstring_problems(_function("deploy", good), fields) == []
    assert docstring_problems(_function("operation", "Do it.\n\n+ a: x", ("a=1",)), set()) == []

    def problems(kind: str, doc: str, signature: tuple[str, ...] = ()) -> str:
        return " ".join(docstring_problems(_function(kind, doc, signature), fields))

    assert "no docstring summary" in problems("deploy", "")
    long = "Install CUDA.\n\n" + "word " * (MAX_DOCSTRING // 5)
    assert f"more than {MAX_DOCSTRING}" in problems("deploy", long)
    assert "not a one-line summary" in problems("deploy", "Install CUDA\nover two lines.")
    assert "not a one-line summary" in problems("deploy", "Install CUDA")
    assert "+ python_version: is no inventory field" in problems(
        "deploy", good + "\n+ python_version: x"
    )
    assert "+ b: is no argument" in problems("operation", "Do it.\n\n+ b: x", ("a",))
    assert "text after the + lines: 'Example.'" in problems("deploy", good + "\n\nExample.")


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
