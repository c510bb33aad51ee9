"""README's deploy steps come in the order a user acts (the key, validate, a dry run, the
deploy, the audit), and the offline ones work as written: they are run here, in a fresh
folder holding the example inventory, as a newcomer would run them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from pyinfra_sglang.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Your hosts, in the order you act"


def deploy_steps() -> list[str]:
    """The commands of README's deploy section, in order, one per line."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_steps_come_in_the_order_a_user_acts():
    steps = deploy_steps()
    order = [
        r".*openssl rand -hex 32 > secrets/sglang-api-key\)",
        r"uv run pyinfra-sglang validate inventories/example\.py",
        r"uv run pyinfra inventories/example\.py deploy/site\.py --dry",
        r"uv run pyinfra inventories/example\.py deploy/site\.py",
        r"uv run pyinfra -y inventories/example\.py deploy/audit\.py",
    ]
    positions = [
        next(i for i, step in enumerate(steps) if re.fullmatch(part, step)) for part in order
    ]
    assert positions == sorted(positions) and len(set(positions)) == len(positions), steps


def test_the_offline_steps_work_as_written(tmp_path, monkeypatch, caplog):
    shutil.copytree(ROOT / "inventories", tmp_path / "inventories")
    monkeypatch.chdir(tmp_path)
    key, validate = deploy_steps()[:2]
    subprocess.run(["bash", "-c", key], check=True, timeout=30)
    assert (tmp_path / "secrets" / "sglang-api-key").stat().st_mode & 0o077 == 0
    assert validate.startswith("uv run pyinfra-sglang ")
    assert main(validate.removeprefix("uv run pyinfra-sglang ").split()) == 0
    # The one thing left is the step README names beside the key: known_hosts.
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warning:")]
    assert len(warned) == 1 and "known_hosts" in warned[0], warned
