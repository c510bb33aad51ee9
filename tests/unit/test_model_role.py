"""The model role's operations from fact inputs: a complete snapshot is a no-op with the
reason, an incomplete one is downloaded in a transient unit, a branch is recorded as the
commit it stood for (so the service resolves it offline)."""

from __future__ import annotations

import shlex

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
        "Qwen/Qwen3-8B", COMMIT, ARGS["cache_dir"], 16_000_000_000, ARGS["python"], 3600
    )
    assert unit.startswith(
        "systemd-run --quiet --unit=pyinfra-sglang-model-download.service "
        "--property=RuntimeMaxSec=3600 "
        "--property=EnvironmentFile=/run/pyinfra-sglang/model-download.env "
        # The service's user, which owns the cache, sandboxed as the service is.
        "--property=User=sglang --property=Group=sglang --property=NoNewPrivileges=yes "
        "--property=ProtectSystem=strict --property=PrivateTmp=yes --property=ProtectHome=yes "
        "--property=ProtectKernelTunables=yes --property=ProtectKernelModules=yes "
        "--property=ProtectControlGroups=yes --property=RestrictSUIDSGID=yes "
        "'--property=ReadWritePaths=/var/lib/sglang/huggingface "
        "/var/lib/sglang/huggingface/hub /var/log/pyinfra-sglang' "
        "/opt/sglang/venv/bin/python "
        "/var/lib/pyinfra-sglang/model_download.py --repo Qwen/Qwen3-8B "
    )
    assert "--setenv" not in unit


def test_the_endpoints_login_and_the_token_reach_the_download_by_a_root_only_file():
    """Before, HF_ENDPOINT went on systemd-run's command line (--setenv), which every local
    user reads in /proc/PID/cmdline, a mirror's user:password with it."""
    from roles.model import download_env

    endpoint = "https://deploy:s3cret%24pw@hub-mirror.internal"
    unit = download_command("org/m", COMMIT, "/srv/hub", 1, ARGS["python"], 60)
    assert "s3cret" not in unit and "hub-mirror" not in unit and "hf_" not in unit
    env = download_env(endpoint, "/srv/hub", "hf_secret_TOKEN_value").decode().splitlines()
    assert env[1:] == [
        "HF_ENDPOINT=https://deploy:s3cret%24pw@hub-mirror.internal",
        "HF_HOME=/var/lib/sglang/huggingface",
        "HF_HUB_CACHE=/srv/hub",
        "HF_HUB_DISABLE_PROGRESS_BARS=1",
        "HF_HUB_DISABLE_TELEMETRY=1",
        "HF_TOKEN=hf_secret_TOKEN_value",
        "HF_XET_HIGH_PERFORMANCE=1",
    ]
    assert not any(
        line.startswith("HF_TOKEN=")
        for line in download_env(endpoint, "/h", None).decode().splitlines()
    )


def test_the_download_is_prepared_for_the_service_user():
    from roles.model import prepare_command

    prepare = prepare_command("/srv/hub")
    # The user exists before the service role runs; the cache and HF_HOME are its own (made,
    # or an empty folder taken: never a tree re-owned); the program is root's, readable.
    # set -e: a failed step stops the rest and the status says so.
    assert prepare.startswith("set -e\n{ id -u sglang >/dev/null 2>&1 || useradd --system ")
    assert "\ninstall -d -m 750 -o sglang -g sglang /srv/hub /var/lib/sglang/huggingface\n" in (
        prepare
    )
    assert "chown" not in prepare
    assert "\ninstall -d -m 700 /run/pyinfra-sglang\n" in prepare
    for program in ("model_download.py", "snapshot_fetch.py", "snapshot_serve.py"):
        assert f"\nchmod 644 /var/lib/pyinfra-sglang/{program}\n" in prepare


def test_failures_shown_mask_the_endpoints_login():
    from roles.model import _login_of

    assert sorted(_login_of("https://deploy:s3cret%24pw@hub-mirror.internal")) == [
        "deploy:s3cret$pw",
        "deploy:s3cret%24pw",
        "s3cret$pw",
        "s3cret%24pw",
    ]
    assert _login_of("https://huggingface.co") == []


def test_a_branch_is_recorded_as_its_commit_once():
    path = "/var/lib/sglang/huggingface/hub/models--Qwen--Qwen3-8B/refs/main"
    assert run_operation(model_ref_recorded, {FirstLine: None}, path=path, commit=COMMIT) == (
        [
            # As the service user: root writing in the user's cache would follow its symlinks.
            "runuser -u sglang -- sh -c "
            + shlex.quote(f"mkdir -p {path.rsplit('/', 1)[0]} && printf '%s' {COMMIT} > {path}")
        ],
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
    from pyinfra_sglang.model_files.model_snapshot import hub_cache_dir
    from pyinfra_sglang.serving.render import EnvSpec, environment

    assert hub_cache_dir() == "/var/lib/sglang/huggingface/hub"
    assert hub_cache_dir("/srv/models/hub/") == "/srv/models/hub"
    env = environment(EnvSpec("/opt/v", hub_cache="/srv/models/hub", offline=True))
    assert env["HF_HUB_CACHE"] == "/srv/models/hub" and env["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_CACHE" not in environment(EnvSpec("/opt/v"))
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
    from pyinfra_sglang.model_files.model_snapshot import ModelPlanError
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


# --- a folder the controller cannot read, sized from the host's own config.json ------------


def _sized_on_host(monkeypatch, config_json, gpus):
    import json as json_module
    from pathlib import Path
    from types import SimpleNamespace

    from pyinfra_sglang.inventory import HostConfig
    from roles import model as role

    configs = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"
    found = json_module.loads((configs / config_json / "config.json").read_text())
    asked = []

    def read_once(host, fact, **kwargs):
        asked.append((fact.__name__, kwargs))
        return found

    monkeypatch.setattr(role, "read_once", read_once)
    monkeypatch.setattr(role, "host", SimpleNamespace(name="gpu-1"))
    config = HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_profile_overrides={"model": "/models/served"},
    )
    role.local_model_sized(config, gpus)
    return asked


H100_ROWS = [
    {"name": "NVIDIA H100 80GB HBM3", "memory.total": "81559 MiB", "compute_cap": "9.0"}
] * 8


def test_a_host_folder_too_large_for_its_gpus_is_refused_with_the_numbers(monkeypatch):
    import pytest

    from roles.model import ModelRefused

    with pytest.raises(ModelRefused) as refused:
        _sized_on_host(monkeypatch, "meta-llama--Llama-3.1-405B", H100_ROWS)
    message = str(refused.value)
    assert message.startswith("host gpu-1: sglang_profile_overrides: model = '/models/served'")
    assert "sized from the host's /models/served/config.json" in message
    assert "811.7 GB / 8" in message and message.endswith("Nothing was changed.")


def test_a_host_folder_that_fits_reads_its_config_once(monkeypatch):
    asked = _sized_on_host(monkeypatch, "Qwen--Qwen3-32B", H100_ROWS)
    assert asked == [("ModelConfigJson", {"path": "/models/served/config.json", "limit": 4194304})]
