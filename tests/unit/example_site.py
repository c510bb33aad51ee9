"""A copy of the example inventories in a test's own folder, with the API key file they
name and empty controller caches (XDG_CACHE_HOME, HF_HUB_CACHE): what the model-sizing,
plan and profile tests validate against."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def example_site(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "inventories", tmp_path / "inventories")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "sglang-api-key").write_text("sk-test-0123\n")
    (tmp_path / "secrets" / "sglang-api-key").chmod(0o600)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    return tmp_path
