"""A model's config.json and weight sizes, read on the controller: from a folder, the
controller's Hub cache, or the Hub (``hf_endpoint``) at the pinned revision. Only
config.json is fetched, never the weights: their sizes come from the Hub's file list (the
API the download plans with) or the folder's files.

A commit's files never change, so what the Hub gave at one is kept in the user's cache
folder (data/model_shape.toml [read]) and read from there the next time.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pyinfra_sglang import data
from pyinfra_sglang.model_files.model_snapshot import (
    COMMIT,
    ModelPlanError,
    cache_folder_name,
    hub_snapshot,
    open_hub_url,
)
from pyinfra_sglang.safe_write import write_file

WEIGHT_SUFFIX = ".safetensors"
# NVIDIA ModelOpt checkpoints (nvidia/GLM-5-NVFP4) describe their quantization in this file
# beside a config.json that has none; SGLang reads it the same way (its modelopt loader).
MODELOPT_FILE = "hf_quant_config.json"


class ModelFilesError(ValueError):
    """The model's config.json could not be read (the message says where it was looked for
    and why)."""


@dataclass(frozen=True)
class ModelFiles:
    config: dict[str, Any]
    weight_bytes: int | None  # the *.safetensors files' sizes; None: not known
    where: str  # where config.json was read, for the plan's "from"
    commit: str | None = None  # the Hub commit read (None: a folder)


def _weights(files: list[tuple[str, int]]) -> int | None:
    sizes = [size for name, size in files if name.endswith(WEIGHT_SUFFIX)]
    return sum(sizes) if sizes else None


def _parse(text: bytes, where: str) -> dict[str, Any]:
    limit = data.model_shape().read.max_config_bytes
    if len(text) > limit:
        raise ModelFilesError(f"{where} is larger than {limit} bytes: not a config.json")
    try:
        config = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelFilesError(f"{where} is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise ModelFilesError(f"{where} is not a JSON object")
    return config


def with_modelopt(config: dict[str, Any], text: bytes | None, where: str) -> dict[str, Any]:
    """config.json with hf_quant_config.json's "quantization" as its quantization_config,
    where the checkpoint has that file and config.json names no quantization of its own."""
    if text is None or config.get("quantization_config"):
        return config
    quantization = _parse(text, where).get("quantization")
    if not isinstance(quantization, dict):
        raise ModelFilesError(f'{where} has no "quantization" table')
    return {**config, "quantization_config": {"quant_method": "modelopt", **quantization}}


def _read_small(path: Path) -> bytes | None:
    """A small file's bytes (at most the config limit and one more), None when absent."""
    try:
        with path.open("rb") as handle:
            return handle.read(data.model_shape().read.max_config_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ModelFilesError(f"{path}: {error.strerror or error}") from None


def read_folder(folder: str | Path) -> ModelFiles:
    """config.json and the *.safetensors sizes of a model folder (a Hub snapshot too: its
    files are links into blobs, followed)."""
    folder = Path(folder)
    path = folder / "config.json"
    text = _read_small(path)
    if text is None:
        raise ModelFilesError(f"{path}: no such file")
    quant = folder / MODELOPT_FILE
    config = with_modelopt(_parse(text, str(path)), _read_small(quant), str(quant))
    files = []
    for entry in sorted(folder.rglob(f"*{WEIGHT_SUFFIX}")):
        try:
            files.append((entry.name, entry.stat().st_size))
        except OSError:
            return ModelFiles(config, None, str(path))
    return ModelFiles(config, _weights(files), str(path))


def controller_hub_cache() -> Path:
    """The controller's Hub cache as huggingface_hub finds it: HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def _user_cache() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / data.model_shape().read.cache_folder


def _cache_slot(repo: str, commit: str) -> Path:
    return _user_cache() / cache_folder_name(repo) / commit


def read_hub_cache(repo: str, revision: str) -> ModelFiles | None:
    """The model from the controller's Hub cache (a commit, or a branch its refs record);
    None when it is not there."""
    base = controller_hub_cache() / cache_folder_name(repo)
    commit = revision
    if not COMMIT.match(revision):
        try:
            commit = (base / "refs" / revision).read_text().strip()
        except OSError:
            return None
    folder = base / "snapshots" / commit
    if not (folder / "config.json").is_file():
        return None
    found = read_folder(folder)
    return ModelFiles(found.config, found.weight_bytes, found.where, commit)


def _read_cached(repo: str, commit: str) -> ModelFiles | None:
    slot = _cache_slot(repo, commit)
    try:
        config = _parse((slot / "config.json").read_bytes(), str(slot / "config.json"))
        sizes = json.loads((slot / "weights.json").read_text())
    except (OSError, ModelFilesError, json.JSONDecodeError):
        return None
    weight_bytes = sizes.get("weight_bytes") if isinstance(sizes, dict) else None
    if weight_bytes is not None and not isinstance(weight_bytes, int):
        return None
    return ModelFiles(config, weight_bytes, f"{repo} at {commit} (read before, {slot})", commit)


def _keep(repo: str, commit: str, text: bytes, weight_bytes: int | None) -> None:
    """Keep what the Hub gave at ``commit`` (config.json, with hf_quant_config.json's
    quantization where the checkpoint has one, and the weights' bytes); a cache that cannot
    be written is no error: the Hub is asked again next time."""
    slot = _cache_slot(repo, commit)
    try:
        slot.mkdir(parents=True, exist_ok=True)
        # Never through a link planted at a name (safe_write.py).
        write_file(slot / "config.json", text)
        write_file(slot / "weights.json", json.dumps({"weight_bytes": weight_bytes}))
    except OSError:
        pass


def read_hub(
    endpoint: str, repo: str, revision: str, token: str | None, timeout_s: float | None = None
) -> ModelFiles:
    """config.json at ``revision`` from the Hub or a mirror, and the weights' sizes from its
    file list; ModelFilesError saying why not."""
    if COMMIT.match(revision):
        kept = _read_cached(repo, revision)
        if kept is not None:
            return kept
    try:
        snapshot = hub_snapshot(endpoint, repo, revision, token, timeout_s)
    except ModelPlanError as error:
        raise ModelFilesError(str(error)) from None
    kept = _read_cached(repo, snapshot.commit)
    if kept is not None:
        return kept
    if "config.json" not in dict(snapshot.files):
        raise ModelFilesError(f"model {repo} at {snapshot.commit} has no config.json on the Hub")
    where = f"{repo} at {snapshot.commit} ({endpoint.rstrip('/')})"
    config = _parse(
        _hub_file(endpoint, repo, snapshot.commit, "config.json", token, timeout_s),
        f"config.json of {where}",
    )
    if MODELOPT_FILE in dict(snapshot.files):
        quant = _hub_file(endpoint, repo, snapshot.commit, MODELOPT_FILE, token, timeout_s)
        config = with_modelopt(config, quant, f"{MODELOPT_FILE} of {where}")
    weight_bytes = _weights(list(snapshot.files))
    _keep(repo, snapshot.commit, json.dumps(config).encode(), weight_bytes)
    return ModelFiles(config, weight_bytes, where, snapshot.commit)


def _hub_file(
    endpoint: str, repo: str, commit: str, name: str, token: str | None, timeout_s: float | None
) -> bytes:
    url = f"{endpoint.rstrip('/')}/{repo}/resolve/{commit}/{urllib.parse.quote(name)}"
    limit = data.model_shape().read.max_config_bytes
    try:
        return open_hub_url(url, token, timeout_s, limit + 1)
    except ModelPlanError as error:
        raise ModelFilesError(f"model {repo} at {commit}: {name}: {error}") from None


@cache
def model_files(
    model: str, revision: str, endpoint: str, token: str | None, timeout_s: float | None = None
) -> ModelFiles:
    """The model's files wherever the controller can read them, in this order: a folder
    (a path), the controller's Hub cache, the Hub at ``endpoint``. Once per run."""
    if model.startswith("/"):
        return read_folder(model)
    cached = read_hub_cache(model, revision)
    if cached is not None:
        return cached
    return read_hub(endpoint, model, revision, token, timeout_s)
