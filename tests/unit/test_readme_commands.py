"""README's offline commands run verbatim in a fresh copy of the checkout, and its inventory
snippet is the example inventory's and validates."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# `uv run X` is X from the project's venv here (uv itself would build a venv in the copy).
UV_SHIM = 'uv() { if [ "$1" = run ]; then shift; fi; "$@"; }\n'


def fresh_copy(tmp_path: Path) -> Path:
    """The checkout's tracked files (what a clone holds), nothing else."""
    tracked = (
        subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    copy = tmp_path / "clone"
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, re.S)


def offline_commands() -> list[str]:
    """The README's lines that run nothing against a host: making secrets, and
    `pyinfra-sglang` commands."""
    lines = [line.strip() for block in sh_blocks() for line in block.splitlines()]
    return [
        line
        for line in lines
        if line.startswith("mkdir -p secrets") or line.startswith("uv run pyinfra-sglang")
    ]


def test_the_readme_offline_commands_work_verbatim_in_a_fresh_copy(tmp_path):
    commands = offline_commands()
    assert any("pyinfra-sglang validate inventories/example.py" in c for c in commands)
    assert commands[0].startswith("mkdir -p secrets")  # the key is made before it is needed
    copy = fresh_copy(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    script = "set -e\n" + UV_SHIM + "\n".join(commands) + "\n"
    done = subprocess.run(
        ["bash", "-c", script], cwd=copy, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu-pcie-01.example.internal: ok" in done.stdout
    assert oct((copy / "secrets" / "sglang-api-key").stat().st_mode & 0o777) == "0o600"


def snippet_hosts() -> list:
    [block] = re.findall(r"```python\n(gpu_servers = \[.*?)```", README, re.S)
    return ast.literal_eval(block.split("=", 1)[1].strip())


def test_the_readme_inventory_is_the_example_inventory():
    module = ast.parse((ROOT / "inventories" / "example.py").read_text())
    [example] = [
        ast.literal_eval(node.value)
        for node in module.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "gpu_servers"
    ]
    assert snippet_hosts() == example
