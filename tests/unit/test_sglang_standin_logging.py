"""The stand-in SGLang server logs its arguments at start as the real one does: the
``server_args=ServerArgs(...)`` line, API key unmasked (sgl-project/sglang#37457), so that a
test asserting the key is absent from what the tool prints means something; and the tool's
redaction (pyinfra_sglang.redact) masks exactly that line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyinfra_sglang.redact import redact
from tests.hosts import pyindex

SGLANG = next(s for s in pyindex.STAND_INS if s.name == "sglang" and s.version == "0.5.23")
API_KEY = "sk-standin-LOGGED-key-0042"
HF_TOKEN = "hf_standin_logging_TOKEN"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("standin-src")
    for relative, data in pyindex.source_files(SGLANG).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root


def start_broken(tree: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """A start that fails to load (broken/...): the server logs its arguments, then exits 1,
    as SGLang does before a model load error; no port is opened."""
    config = tmp_path / "sglang.yaml"
    config.write_text(f"api-key: {json.dumps(API_KEY)}\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(tree),
        "SGLANG_STANDIN_RUN_DIR": str(tmp_path / "run"),
        "SGLANG_STANDIN_FAIL_S": "0",
        "HF_TOKEN": HF_TOKEN,
    }
    return subprocess.run(
        [sys.executable, "-S", "-m", "sglang.launch_server", "--model-path", "broken/model"]
        + ["--config", str(config), "--tp-size", "2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def server_args_line(output: str) -> str:
    [line] = [line for line in output.splitlines() if "server_args=ServerArgs(" in line]
    return line


def test_the_start_line_holds_the_arguments_and_the_key_as_sglang_logs_them(tree, tmp_path):
    done = start_broken(tree, tmp_path)
    assert done.returncode == 1
    line = server_args_line(done.stdout)
    # "[stamp] server_args=ServerArgs(model_path='broken/model', ...)": a dataclass repr.
    assert line.split("] ", 1)[1].startswith("server_args=ServerArgs(model_path='broken/model', ")
    assert f"api_key={API_KEY!r}" in line  # unmasked, as SGLang's own
    assert "tp_size=2" in line and f"config='{tmp_path}/sglang.yaml'" in line
    # Its record, which tests read, still masks the key; the HF token is in neither.
    record = json.loads((tmp_path / "run" / "30000.json").read_text())
    assert record["settings"]["api_key"] == "********"
    assert API_KEY not in json.dumps(record)
    assert HF_TOKEN not in done.stdout + done.stderr + json.dumps(record)


def test_the_tools_redaction_masks_that_line(tree, tmp_path):
    line = server_args_line(start_broken(tree, tmp_path).stdout)
    masked = redact(line)  # by its form alone, without knowing the key
    assert API_KEY not in masked and "api_key='********'" in masked
    assert "model_path='broken/model'" in masked and "tp_size=2" in masked


def test_a_key_with_quotes_is_logged_as_python_writes_it_and_still_masked(tree, tmp_path):
    done = start_broken(tree, tmp_path, "--api-key", 'sk-it\'s "quoted"')
    line = server_args_line(done.stdout)
    assert "api_key='sk-it\\'s \"quoted\"'" in line
    masked = redact(line, secrets=['sk-it\'s "quoted"'])
    assert "quoted" not in masked and "sk-it" not in masked
