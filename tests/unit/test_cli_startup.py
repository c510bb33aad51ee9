"""The CLI loads only what the subcommand being run needs: `--help` and `--version` load no
pyinfra, pydantic or matplotlib (they took ~3 s; bench/cli_startup.py times it)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyinfra", "pydantic", "matplotlib", "jinja2")
PROBE = """
import sys
from pyinfra_sglang.cli import main as cli
try:
    cli.main({argv!r})
except SystemExit as stop:
    print("exit", stop.code)
print("loaded", sorted(m for m in {heavy!r} if m in sys.modules))
"""


def probe(argv: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.splitlines()


def test_help_and_version_load_nothing_heavy():
    for argv in (["--help"], ["--version"], ["build-plan", "--help"]):
        lines = probe(argv)
        assert lines[-2:] == ["exit 0", "loaded []"], (argv, lines)


def test_version_names_the_package():
    lines = probe(["--version"])
    assert lines[0].startswith("pyinfra-sglang ") and lines[0] != "pyinfra-sglang unknown"


def test_a_subcommand_still_gets_its_arguments_and_loads_what_it_needs():
    lines = probe(["diagnose", "--help"])
    assert any("RESULTS_DIR" in line for line in lines)
    assert lines[-2] == "exit 0"
    # A wrong subcommand argument is argparse's error, exit 2.
    assert probe(["build-plan", "--cores", "0", "--mem-gb", "1"])[-2] == "exit 2"
