"""Where the stand-in finds a Hub model's weights, as huggingface_hub's snapshot_download
finds them with HF_HUB_OFFLINE=1 (huggingface_hub 0.36, _snapshot_download.py): the cache
folder (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), the repository's
``models--<org>--<name>`` folder, the revision as a commit (40 hex) or through ``refs/<name>``,
and ``snapshots/<commit>``. Offline and without that folder it fails as huggingface_hub does,
so a server that would need the Hub to start cannot start here either."""

from __future__ import annotations

import os
import re
from pathlib import Path

COMMIT = re.compile(r"^[0-9a-f]{40}$")
OFFLINE_ERROR = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
    "folder for the specified revision on the local disk and outgoing traffic has been "
    "disabled. To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as "
    "environment variable."
)


def is_hub_id(model: str) -> bool:
    return not model.startswith(("/", ".", "~")) and model.count("/") == 1


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    return Path(home) / "hub"


def offline_snapshot(model: str, revision: str | None) -> Path | None:
    """The snapshot folder offline mode would load ``model`` from, or None."""
    storage = hub_cache() / ("models--" + model.replace("/", "--"))
    revision = revision or "main"
    commit = revision if COMMIT.match(revision) else None
    ref = storage / "refs" / revision
    if commit is None and ref.is_file():
        commit = ref.read_text().strip()
    if commit is None:
        return None
    folder = storage / "snapshots" / commit
    return folder if (folder / "config.json").is_file() else None
