"""The model download: the Hub revision, the cache it lands in, its time limit, the Hub
mirror and token (roles/model.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, HttpUrl, StrictBool

from pyinfra_sglang.config.types import (
    SAFE_HOST_PATH,
    FieldGroup,
    OptionalPath,
    Port,
    allowed,
    path_fits,
)
from pyinfra_sglang.model_files.cache_dir import path_problem

# Folders the sandboxed service cannot see (ProtectHome=yes in templates/sglang.service.j2).
HIDDEN_FROM_THE_SERVICE = ("/home", "/root", "/run/user")


def _visible_to_the_service(path: str) -> str:
    hidden = [p for p in HIDDEN_FROM_THE_SERVICE if path == p or path.startswith(p + "/")]
    if hidden:
        raise ValueError(f"{path} is under {hidden[0]}, which the sandboxed service cannot see")
    return path


def _not_a_system_tree(path: str) -> str:
    # The service user comes to own the cache: never a system tree
    # (pyinfra_sglang/model_files/cache_dir.py).
    problem = path_problem(path)
    if problem:
        raise ValueError(problem)
    return path


class ModelDownloadFields(FieldGroup):
    """The model download: revision, cache, time limit, Hub mirror and token, once a site."""

    sglang_model_revision: (
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")] | None
    ) = Field(
        None,
        description=(
            "Revision of the profile's Hub model to download and serve: a commit (40 hex "
            "digits; a branch or tag is resolved to its commit before any change and "
            "reported). Unset: the commit the profile pins (its revision), else the "
            "repository's main branch, resolved the same way."
        ),
        json_schema_extra=allowed("a commit, branch or tag of the model's repository"),
    )

    sglang_model_cache_dir: (
        Annotated[
            str,
            Field(pattern=SAFE_HOST_PATH),
            AfterValidator(path_fits),
            AfterValidator(_visible_to_the_service),
            AfterValidator(_not_a_system_tree),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Hub cache folder the model is downloaded into and served from (HF_HUB_CACHE), on "
            "a filesystem with room for it: GPU hosts' root filesystems are often small. "
            "Unset: /var/lib/sglang/huggingface/hub. Not under /home, /root or /run/user (the "
            "sandboxed service cannot see them). The service user comes to own it: never a "
            "system tree (/etc, /usr, /var... except below /var/lib/sglang) nor a shared "
            "parent itself (/srv, /opt, /data...); on the host, before any change, no "
            "symlinked component, no package's folder, and an existing folder must be the "
            "service user's or empty (no tree is re-owned)."
        ),
        json_schema_extra=allowed(
            "a clean absolute path of letters, digits, '.', '_', '-', '/' below "
            "/var/lib/sglang or a folder of its own elsewhere (e.g. /srv/sglang-hub), outside "
            "system trees, /home, /root, /run/user; or unset"
        ),
    )

    sglang_model_download_timeout_s: int = Field(
        21600,
        ge=60,
        le=604800,
        description=(
            "Seconds the model download may take before it is stopped (it resumes on the "
            "next run): GLM-5-NVFP4's 460.8 GB at 200 MB/s take about 38 minutes. It is "
            "the download unit's "
            "RuntimeMaxSec: at most 604800 (7 days, for slow links), well within what "
            "systemd parses (it ignores a span it cannot, and the limit with it)."
        ),
        json_schema_extra=allowed("60..604800"),
    )

    hf_endpoint: HttpUrl | None = Field(
        None,
        description=(
            "Base URL of a Hugging Face Hub mirror (HF_ENDPOINT) for the model download and "
            "the planning that precedes it; unset: https://huggingface.co."
        ),
        json_schema_extra=allowed("an http(s) URL, or unset"),
    )

    hf_token_file: OptionalPath = Field(
        None,
        description="File on the controller holding the Hugging Face token (written 0600).",
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    model_fetch_once: StrictBool = Field(
        False,
        description=(
            "Download the model once per site: of the hosts of a run with this set and the "
            "same model, revision and Hub, the first in the inventory downloads it, and the "
            "others copy its snapshot from that host (at its `sglang_host`, or where that is "
            "loopback the address the inventory reaches it by; a one-time token; each file "
            "checked against the Hub's list) and never reach the Hub."
        ),
        json_schema_extra=allowed("true, false"),
    )

    model_seed_port: Port = Field(
        30091,
        description=(
            "TCP port the seed host serves its snapshot on while the others copy it "
            "(model_fetch_once); open only for that time, and only to the copying hosts."
        ),
        json_schema_extra=allowed("1..65535"),
    )

    model_seed_firewall: StrictBool = Field(
        True,
        description=(
            "While the seed serves its snapshot (model_fetch_once), an nftables table on it "
            "admits only the copying hosts to `model_seed_port`; a seed whose nft is refused "
            "does not serve. false: no table, the one-time token alone keeps the files to "
            "the site (where the seed may not change its firewall)."
        ),
        json_schema_extra=allowed("true, false"),
    )
