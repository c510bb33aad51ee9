"""Reference tables in docs/, generated from code: the inventory fields (docs/inventory.md),
the profile keys (docs/profiles.md),
the finding codes (docs/audit.md), the `pyinfra-sglang` subcommands (docs/cli.md) and the
list of their names (docs/packaging.md), the NVIDIA driver's package names with their sources
(docs/packages.md), the roles and their operations from their docstrings and the supported
platforms from data/platforms.toml (docs/roles.md).

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` lines; the text
around it is written by hand. tests/unit/test_reference_docs.py fails when a block differs
from what the code generates. Regenerate them all from the checkout's root with
``uv run python -m pyinfra_sglang.docgen.reference_docs`` (``--check``: write nothing, exit 1 on
drift).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pyinfra_sglang import data
from pyinfra_sglang.audit.codes import codes_markdown
from pyinfra_sglang.cli import main as cli
from pyinfra_sglang.config.reference import reference_markdown
from pyinfra_sglang.doc_markers import block, replace_block  # noqa: F401 (block: read through here)
from pyinfra_sglang.docgen.profile_reference import profile_reference_markdown
from pyinfra_sglang.docgen.role_reference import operations_markdown, roles_markdown
from pyinfra_sglang.docgen.what_happens import what_happens_markdown
from pyinfra_sglang.driver.driver_plan import packages_markdown

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


# --- the CLI subcommand table -------------------------------------------------------------


def _cell(text: str) -> str:
    """Text fit for a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _invocation(action: argparse.Action) -> str:
    """How an argument is written: ``RESULTS_DIR``, ``--json``, ``--data KEY=VALUE``."""
    metavar = action.metavar or (action.dest if not action.option_strings else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if not action.option_strings:
        return metavar
    if action.nargs == 0:
        value = ""
    elif action.nargs == "+":
        value = f" {metavar} [{metavar} ...]"
    elif action.nargs == "*":
        value = f" [{metavar} ...]"
    elif action.nargs == "?":
        value = f" [{metavar}]"
    elif isinstance(action.nargs, int):
        value = "".join(f" {metavar}" for _ in range(action.nargs))
    else:
        value = f" {metavar}"
    return " / ".join(f"{option}{value}" for option in action.option_strings)


def _argument(action: argparse.Action) -> str:
    notes = []
    if action.option_strings and action.required:
        notes.append("required")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
        notes.append("repeatable")
    text = f"`{_invocation(action)}`"
    if notes:
        text += f" ({', '.join(notes)})"
    if action.help and action.help != argparse.SUPPRESS:
        text += f": {_cell(action.help)}"
    return text


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_markdown() -> str:
    """The table of `pyinfra-sglang` subcommands in docs/cli.md: each one's help and the
    arguments its argparse subparser takes, in the CLI's own order."""
    subparsers = _subparsers(cli.build_parser(every=True))
    rows = ["| subcommand | what it does | arguments |", "| --- | --- | --- |"]
    for command in cli.COMMANDS:
        parser = subparsers[command.name]
        arguments = [
            _argument(action)
            for action in parser._actions
            if not isinstance(action, argparse._HelpAction)
        ]
        rows.append(
            f"| `{command.name}` | {_cell(command.help)} | {'<br>'.join(arguments) or 'none'} |"
        )
    # A command's epilog (its --help's closing text) follows the table, one paragraph each.
    notes = [
        f"\n`{command.name}`: {' '.join(subparsers[command.name].epilog.split())}\n"
        for command in cli.COMMANDS
        if subparsers[command.name].epilog
    ]
    return "\n".join(rows) + "\n" + "".join(notes)


def command_names_markdown() -> str:
    """The offline commands' names, in the CLI's order, as one Markdown line."""
    return ", ".join(f"`{command.name}`" for command in cli.COMMANDS) + "\n"


# --- the tuner's settings ---------------------------------------------------------------------


def _tuning_value(value: object) -> str:
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def tuning_settings_markdown() -> str:
    """The settings deploy/tune.py searches (data/tuning.toml [settings]), in its search
    order ([search] order), each with its values and where it applies."""
    tuning = data.tuning()
    rows = ["| setting | values | applies |", "| --- | --- | --- |"]
    for name in tuning.search.order:
        setting = tuning.settings[name]
        where = []
        if setting.profile_fields:
            fields = ", ".join(f"`{field}`" for field in setting.profile_fields)
            where.append(f"profiles that set {fields}")
        if setting.divides_gpus:
            where.append("values that divide the host's GPU count")
        for field, value in setting.requires.items():
            where.append(f"with `{field}` = {_tuning_value(value)}")
        if setting.min_sglang_version:
            where.append(f"SGLang {setting.min_sglang_version} and later")
        if setting.archs:
            where.append(", ".join(f"`{arch}`" for arch in setting.archs) + " only")
        values = ", ".join(_tuning_value(value) for value in setting.values)
        rows.append(f"| `{name}` | {values} | {'; '.join(where) or 'always'} |")
    return "\n".join(rows) + "\n"


# --- the supported platforms -----------------------------------------------------------------


def platforms_markdown() -> str:
    """The distros and architectures of data/platforms.toml, with what each means for NVIDIA's
    repository and the driver's package names."""
    platforms = data.platforms()
    rows = [
        "| distro (os-release `ID`) | `VERSION_ID` | NVIDIA repository folder "
        "| driver package names of | extra apt components |",
        "| --- | --- | --- | --- | --- |",
    ]
    for platform in platforms.platform:
        components = ", ".join(f"`{c}`" for c in platform.components) or "none"
        rows.append(
            f"| `{platform.id}` | {platform.version} | `{platform.nvidia_repo}` "
            f"| `{platform.driver_family}` ([packages.md](packages.md)) | {components} |"
        )
    arches = ", ".join(
        f"`{machine}` (NVIDIA's folder `{folder}`)" for machine, folder in platforms.arch.items()
    )
    return "\n".join(rows) + f"\n\nArchitectures (`uname -m`): {arches}.\n"


# --- all blocks ----------------------------------------------------------------------------

# Marker name -> (file under docs/, what generates its block).
BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "inventory-reference": ("inventory.md", reference_markdown),
    "profile-reference": ("profiles.md", profile_reference_markdown),
    "finding-codes": ("audit.md", codes_markdown),
    "tuning-settings": ("benchmark-and-diagnosis.md", tuning_settings_markdown),
    "what-happens": ("what-happens.md", what_happens_markdown),
    "cli": ("cli.md", cli_markdown),
    "driver-packages": ("packages.md", packages_markdown),
    "offline-commands": ("packaging.md", command_names_markdown),
    "roles": ("roles.md", roles_markdown),
    "role-operations": ("roles.md", operations_markdown),
    "platforms": ("roles.md", platforms_markdown),
}


def _updated(docs_dir: Path) -> dict[Path, tuple[str, str]]:
    """Per docs file holding a block: (its text, its text with every block regenerated)."""
    files: dict[Path, tuple[str, str]] = {}
    for name, (file_name, generate) in BLOCKS.items():
        path = Path(docs_dir) / file_name
        current, updated = files.get(path, (path.read_text(), path.read_text()))
        files[path] = (current, replace_block(updated, name, generate()))
    return files


def stale_reference_docs(docs_dir: Path = DOCS_DIR) -> list[Path]:
    """The docs files whose generated blocks differ from the code."""
    return [path for path, (old, new) in _updated(docs_dir).items() if old != new]


def write_reference_docs(docs_dir: Path = DOCS_DIR) -> list[Path]:
    """Regenerate every block under ``docs_dir``; returns the files that changed."""
    changed = []
    for path, (old, new) in _updated(docs_dir).items():
        if old != new:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyinfra_sglang.docgen.reference_docs",
        description="Regenerate the reference tables in docs/ from the code.",
    )
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help=f"default: {DOCS_DIR}")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when a table is stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_reference_docs(args.docs_dir)
        for path in stale:
            print(f"stale: {path} (run `uv run python -m pyinfra_sglang.docgen.reference_docs`)")
        return 1 if stale else 0
    for path in write_reference_docs(args.docs_dir):
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
