"""The model role's operations from fact inputs: a complete snapshot is a no-op with the
reason, an incomplete one is downloaded in a transient unit, a branch is recorded as the
commit it stood for (so the service resolves it offline)."""

from __future__ import annotations

from checks.facts import FirstLine
from roles.model import download_command, model_ref_recorded, model_snapshot_downloaded
from tests.unit.ophelper import run_operation

COMMIT = "a" * 40
ARGS = {
    "repo": "Qwen/Qwen3-8B",
    "commit": COMMIT,
    "files": 3,
    "total_bytes": 16_000_000_000,
    "missing_bytes": 0,
    "cache_dir": "/var/lib/sglang/huggingface/hub",
    "python": "/opt/sglang/venv/bin/python",
    "endpoint": "https://huggingface.co",
    "token_file": None,
    "timeout_s": 3600,
}


def test_a_complete_snapshot_is_a_noop_saying_where():
    assert run_operation(model_snapshot_downloaded, {}, **ARGS) == (
        [],
        [
            f"Qwen/Qwen3-8B at {COMMIT}: 3 files, 16.0 GB, complete in "
            f"/var/lib/sglang/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/{COMMIT}"
        ],
    )


def test_what_is_missing_is_downloaded_in_a_transient_unit(tmp_path):
    token = tmp_path / "hf-token"
    token.write_text("hf_secret_TOKEN_value\n")
    token.chmod(0o600)
    [command], noops = run_operation(
        model_snapshot_downloaded, {}, **{**ARGS, "missing_bytes": 1, "token_file": str(token)}
    )
    assert command.startswith("FunctionCommand(_download") and noops == []
    # The token is read where it is used: not in the command's string form (debug output).
    assert "hf_secret_TOKEN_value" not in command
    unit = download_command(
        "Qwen/Qwen3-8B",
        COMMIT,
        ARGS["cache_dir"],
        16_000_000_000,
        ARGS["python"],
        {"HF_ENDPOINT": "https://huggingface.co", "HF_TOKEN_PATH": "/run/pyinfra-sglang/hf-token"},
        3600,
    )
    assert unit.startswith(
        "systemd-run --quiet --unit=pyinfra-sglang-model-download.service "
        "--property=RuntimeMaxSec=3600 --setenv=HF_ENDPOINT=https://huggingface.co "
        "--setenv=HF_TOKEN_PATH=/run/pyinfra-sglang/hf-token /opt/sglang/venv/bin/python "
        "/var/lib/pyinfra-sglang/model_download.py --repo Qwen/Qwen3-8B "
    )
    # The token travels in a root-only file the client reads, never on a command line.
    assert "hf_" not in unit.replace("hf-token", "").replace("huggingface", "")


def test_a_branch_is_recorded_as_its_commit_once():
    path = "/var/lib/sglang/huggingface/hub/models--Qwen--Qwen3-8B/refs/main"
    assert run_operation(model_ref_recorded, {FirstLine: None}, path=path, commit=COMMIT) == (
        [f"mkdir -p {path.rsplit('/', 1)[0]} && printf '%s' {COMMIT} > {path}"],
        [],
    )
    assert run_operation(model_ref_recorded, {FirstLine: COMMIT}, path=path, commit=COMMIT) == (
        [],
        [f"{path} holds {COMMIT}"],
    )


def test_the_cache_folder_is_the_services_and_stays_visible_to_it():
    import pytest
    from pydantic import ValidationError

    from pyinfra_sglang.inventory import HostConfig
    from pyinfra_sglang.model_snapshot import hub_cache_dir
    from pyinfra_sglang.render import environment

    assert hub_cache_dir() == "/var/lib/sglang/huggingface/hub"
    assert hub_cache_dir("/srv/models/hub/") == "/srv/models/hub"
    env = environment(None, "/opt/v", hub_cache="/srv/models/hub", offline=True)
    assert env["HF_HUB_CACHE"] == "/srv/models/hub" and env["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_CACHE" not in environment(None, "/opt/v")
    assert HostConfig(sglang_model_cache_dir="/srv/models/hub").sglang_model_cache_dir
    # The sandboxed service cannot see these (ProtectHome), and a path must be plain.
    for hidden in ("/home/models", "/root/hub", "/run/user/0/hub", "relative/hub", "/a b"):
        with pytest.raises(ValidationError, match="sglang_model_cache_dir"):
            HostConfig(sglang_model_cache_dir=hidden)


def test_the_download_lines_say_done_of_total_rate_eta_then_what_was_fetched():
    from pyinfra_sglang.host_programs.model_download import complete_line, progress_line

    assert progress_line(212_400_000_000, 400_000_000_000, 200e6) == (
        "212.4 of 400.0 GB, 200 MB/s, ETA 15m38s"
    )
    assert progress_line(0, 400_000_000_000, 0.0) == "0.0 of 400.0 GB, 0 MB/s, ETA unknown"
    # A resumed run fetched only the rest: its rate is that part's over its own time.
    assert complete_line(400e9, 187.6e9, 938, "/hub/snapshots/c") == (
        "complete: 400.0 GB in /hub/snapshots/c; 187.6 GB fetched in 15m38s, 200 MB/s"
    )


def test_a_revision_the_hub_lacks_names_the_profile_that_pinned_it():
    from pyinfra_sglang.model_snapshot import ModelPlanError
    from roles.model import plan_refusal

    error = ModelPlanError(
        "model nvidia/GLM-5-NVFP4 at revision " + "d" * 40 + ": the Hub has no such revision "
        "(a commit, branch or tag of nvidia/GLM-5-NVFP4)"
    )
    assert plan_refusal("gpu-1", error, "glm-5-nvfp4") == (
        f"host gpu-1: {error} (the revision profile glm-5-nvfp4 pins; sglang_model_revision "
        "names another). Nothing was changed."
    )
    assert plan_refusal("gpu-1", error, None) == f"host gpu-1: {error}. Nothing was changed."
