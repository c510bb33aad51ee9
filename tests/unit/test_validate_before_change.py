"""Validation refuses, before any host changes, what would otherwise fail later (after the
driver, CUDA and the virtualenv changed): it renders every host's files with the GPUs the
inventory plans for, reads the secret files, checks SSH host key settings, and reads
command-line values as they were meant."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.inventory import (
    HostConfig,
    InventoryError,
    InventoryFileError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.serving.placement import NodePosition
from pyinfra_sglang.serving.profiles import load_profile
from pyinfra_sglang.serving.secret_files import MAX_SECRET_BYTES, SecretFileError, read_secret
from pyinfra_sglang.serving.service_files import (
    node_position,
    planned_gpus,
    planned_service_files,
    router_requirements,
)

SSH_YES = {"ssh_strict_host_key_checking": "yes"}


def write_inventory(folder: Path, hosts: dict[str, dict], group: str = "gpus") -> str:
    """An inventory file of ``hosts`` (name -> host data) in one group."""
    path = folder / "inv.py"
    entries = ", ".join(f"({name!r}, {data!r})" for name, data in hosts.items())
    path.write_text(f"{group} = [{entries}]\n")
    return str(path)


def validate(folder: Path, hosts: dict[str, dict], override: dict | None = None, group="gpus"):
    """(configs, problems, warnings) of an inventory of ``hosts``."""
    warnings: list[str] = []
    inventory = load_inventory_file(write_inventory(folder, hosts, group), override)
    try:
        return validate_inventory(inventory, warn=warnings.append), [], warnings
    except InventoryError as error:
        return {}, error.problems, warnings


def only_problem(folder, hosts, override=None, group="gpus"):
    _, problems, _ = validate(folder, hosts, override, group)
    assert len(problems) == 1, problems
    return problems[0]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# --- rendered with the planned GPUs (finding 2) ------------------------------------------


def test_what_only_the_gpus_would_refuse_is_refused_by_validate(tmp_path):
    # Before: validate said ok; the fit check ran only once nvidia-smi saw GPUs, after the
    # driver and CUDA were installed. The host cannot be read yet, so the largest GPU of the
    # profile's architectures is assumed (a B200, 180 GB): 2 of them cannot hold GLM-5.
    data = {**SSH_YES, "sglang_model_profile": "glm-5-nvfp4", "expected_gpu_count": 2}
    problem = only_problem(tmp_path, {"gpu1": data})
    assert (problem.host, problem.field, problem.value) == ("gpu1", "expected_gpu_count", "2")
    assert "does not fit 2 x 180 GB" in problem.message and "2 x NVIDIA B200" in problem.message


def test_a_tp_size_larger_than_the_planned_gpus_is_refused(tmp_path):
    problem = only_problem(
        tmp_path,
        {
            "gpu1": {
                **SSH_YES,
                "sglang_model_profile": "dense-bf16",
                "expected_gpu_count": 2,
                "sglang_profile_overrides": {"tp_size": 4},
            }
        },
    )
    # The override caused it: the problem names it, not the GPU count it does not fit.
    assert problem.field == "sglang_profile_overrides" and "sets tp_size 4" in problem.message


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ({"model": "org/model\nExecStartPre=/bin/evil"}, "\\n"),
        ({"served_model_name": "glm\r5"}, "\\r"),
        ({"extra_args": ["--disable-radix-cache\x00"]}, "\\x00"),
    ],
)
def test_control_characters_in_overrides_are_refused(tmp_path, override, shown):
    problem = only_problem(tmp_path, {"gpu1": {**SSH_YES, "sglang_profile_overrides": override}})
    assert problem.field == "sglang_profile_overrides"
    assert "control characters" in problem.message


def test_control_characters_in_a_profile_file_are_refused(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.toml").write_text(
        'model = "org/model\\r"\nmin_total_gpu_memory_gb = 10\n'
    )
    problem = only_problem(
        tmp_path,
        {"gpu1": {**SSH_YES, "sglang_model_profile": "mine", "sglang_profile_dirs": ["profiles"]}},
    )
    assert problem.field == "sglang_model_profile"
    assert "control characters (\\r)" in problem.message


@pytest.mark.parametrize(
    "value", ["/opt/v env", "/opt/$HOME/v", "/opt/v%n", '/opt/"v"', "/opt/v'x", "/opt/v\\x"]
)
def test_venv_path_of_unsafe_characters_is_refused(value):
    config, problems = validate_host_data("gpu1", {"venv_path": value})
    assert config is None and [p.field for p in problems] == ["venv_path"]
    assert "letters, digits" in problems[0].allowed


def test_planned_gpus_are_the_largest_of_the_profiles_archs():
    dense = load_profile("dense-bf16")  # any arch: the largest GPU of the table
    glm = load_profile("glm-5-nvfp4")  # sm_100 / sm_120
    planned = planned_gpus(HostConfig(expected_gpu_count=8), glm)
    assert planned.arch in ("sm_100", "sm_120") and planned.count == 8
    # Unset: the fewest GPUs that hold the profile (3 B200s would, per GPU; 64 heads need 4).
    fewest = planned_gpus(HostConfig(), glm)
    assert (fewest.count, fewest.memory_gb) == (4, 180)
    assert planned_gpus(HostConfig(), dense).count == 1


def test_validate_renders_every_file_masked(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-REAL-key\n")
    key.chmod(0o600)
    config = HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_host="0.0.0.0",
        sglang_api_key_file=key,
        sglang_router_worker_urls=["http://10.0.0.1:30000"],
        sglang_router_api_key_file=key,
    )
    service = planned_service_files(config, NodePosition())
    text = "".join(f.content for f in service.files)
    assert "sk-REAL-key" not in text and text.count("********") == 2
    assert [f.path.rsplit("/", 1)[1] for f in service.files] == [
        "sglang.service",
        "sglang.env",
        "sglang.yaml",
        "sglang-router.service",
        "sglang-router.env",
    ]


# --- managed flags (finding 3) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--host", "0.0.0.0"], "--host"),
        (["--port=8000"], "--port"),
        (["--ho", "0.0.0.0"], "--ho (argparse reads it as --host)"),
        (["--api-k", "x"], "--api-k (argparse reads it as --api-key)"),
        (["--admin-api-key=x"], "--admin-api-key"),
        (["--config", "/tmp/x.yaml"], "--config"),
        (["--tensor-parallel-size", "2"], "--tensor-parallel-size"),
        (["--model", "other/model"], "--model"),
        (["--dist-init-addr", "1.2.3.4:5"], "--dist-init-addr"),
        (["--nnodes", "2"], "--nnodes"),
        (["--node-rank=1"], "--node-rank"),
    ],
)
def test_extra_args_setting_a_managed_flag_are_refused_by_name(tmp_path, args, named):
    problem = only_problem(
        tmp_path, {"gpu1": {**SSH_YES, "sglang_profile_overrides": {"extra_args": args}}}
    )
    assert problem.field == "sglang_profile_overrides" and named in problem.message


# --- values read as meant (finding 10) ---------------------------------------------------


@pytest.mark.parametrize(
    ("field", "number"),
    [
        ("python_version", 3.1),  # --data python_version=3.10
        ("cuda_version", 13.1),  # --data cuda_version=13.10
        ("sglang_version", 0.5),
        ("uv_version", 0.13),
        ("flash_attn_version", 2.8),
    ],
)
def test_versions_given_as_numbers_are_refused_with_a_quoting_hint(field, number):
    config, [problem] = validate_host_data("gpu1", {field: number}, {field: "--data"})
    assert config is None and problem.field == field and problem.source == "--data"
    assert "quote the value" in problem.message and f"--data '{field}=\"" in problem.message


def test_quoted_versions_pass(tmp_path):
    configs, problems, _ = validate(
        tmp_path, {"gpu1": SSH_YES}, override={"python_version": "3.10", "cuda_version": "13.0"}
    )
    assert problems == [] and configs["gpu1"].python_version == "3.10"


@pytest.mark.parametrize(
    "field",
    [
        "sglang_port",
        "sglang_router_port",
        "sglang_dist_init_port",
        "sglang_router_metrics_port",
        "expected_gpu_count",
        "bench_repeat",
    ],
)
def test_booleans_are_not_numbers(field):
    # --data sglang_port=true used to be port 1.
    config, [problem] = validate_host_data("gpu1", {field: True})
    assert config is None and problem.field == field and "true/false" in problem.message


@pytest.mark.parametrize(
    ("values", "field", "other"),
    [
        ({"sglang_router_port": 30000}, "sglang_router_port", "sglang_port"),
        ({"sglang_router_metrics_port": 30080}, "sglang_router_metrics_port", "sglang_router_port"),
        (
            {"sglang_multinode_group": "gpus", "sglang_dist_init_port": 30000},
            "sglang_dist_init_port",
            "sglang_port",
        ),
    ],
)
def test_the_ports_of_a_host_differ(values, field, other):
    routed = {"sglang_router_worker_urls": ["http://10.0.0.1:30000"]}
    config, [problem] = validate_host_data("gpu1", {**routed, **values})
    assert config is None and problem.field == field
    assert f"is also {other}" in problem.message


def test_ports_of_listeners_a_host_does_not_run_may_match():
    # No router, no multi-node group: their ports are not listened on.
    config, problems = validate_host_data(
        "gpu1", {"sglang_router_port": 30000, "sglang_dist_init_port": 30000}
    )
    assert problems == [] and config is not None


def test_an_ipv6_head_is_bracketed_in_dist_init_addr(tmp_path):
    config = HostConfig(sglang_multinode_group="pair")
    assert node_position(config, "b", ["a", "b"], "fd00::1") == NodePosition(
        2, 1, "[fd00::1]:50000"
    )
    assert node_position(config, "a", ["a", "b"], "10.0.0.1").dist_init_addr == "10.0.0.1:50000"
    # Validation renders it so, from the head's ssh_hostname.
    hosts = {
        "a": {**SSH_YES, "ssh_hostname": "fd00::1", "sglang_multinode_group": "pair"},
        "b": {**SSH_YES, "ssh_hostname": "fd00::2", "sglang_multinode_group": "pair"},
    }
    configs, problems, _ = validate(tmp_path, hosts, group="pair")
    assert problems == [] and sorted(configs) == ["a", "b"]


# --- the router (finding 4) --------------------------------------------------------------

ROUTED = {"sglang_router_worker_urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]}


def test_the_router_binds_loopback_unless_told_otherwise():
    assert str(HostConfig(**ROUTED).router_bind()) == "127.0.0.1"
    # A wildcard server bind does not carry over to the router.
    public = HostConfig(**ROUTED, sglang_host="0.0.0.0", sglang_api_key_file="/k")
    assert str(public.router_bind()) == "127.0.0.1"
    # A loopback server address other than 127.0.0.1 is the router's too.
    assert str(HostConfig(**ROUTED, sglang_host="127.0.0.5").router_bind()) == "127.0.0.5"
    # Metrics: on loopback, always.
    keyed = HostConfig(**ROUTED, sglang_router_host="10.0.0.9", sglang_router_api_key_file="/k")
    assert str(keyed.router_bind()) == "10.0.0.9"
    assert str(keyed.router_metrics_bind()) == "127.0.0.1"


def test_a_public_router_without_a_key_is_refused():
    config, [problem] = validate_host_data("gpu1", {**ROUTED, "sglang_router_host": "0.0.0.0"})
    assert config is None and problem.field == "sglang_router_host"
    assert "sglang_router_api_key_file" in problem.message
    config, problems = validate_host_data(
        "gpu1", {**ROUTED, "sglang_router_host": "0.0.0.0", "sglang_router_api_key_file": "/k"}
    )
    assert problems == []


def test_the_router_release_is_pinned_per_sglang_release():
    # sglang-router up to 0.5.8 (its last release, 0.3.2), its continuation smg from 0.5.9.
    assert router_requirements("0.5.23") == {"smg": "1.13.0"}
    assert router_requirements("0.5.21") == {"smg": "1.11.0"}
    assert router_requirements("0.5.9") == {"smg": "1.1.0"}
    assert router_requirements("0.5.8") == {"sglang-router": "0.3.2"}
    assert router_requirements("0.5.6.post1") == {"sglang-router": "0.2.3"}
    assert router_requirements("0.5.7") == {"sglang-router": "0.3.0"}
    with pytest.raises(Exception, match="no router release is pinned for SGLang 0.5.4"):
        router_requirements("0.5.4")


def test_a_routed_host_on_an_sglang_release_without_a_pinned_router_is_refused(tmp_path):
    # Older than the flags were read too: accepted for its flags, it is still refused by what
    # has no entry for it (the router pins, the Python stacks); router_requirements's own
    # refusal is tested above.
    host = {**SSH_YES, **ROUTED, "sglang_model_profile": "dense-bf16"}
    problem = only_problem(
        tmp_path,
        {"gpu1": {**host, "sglang_allow_unread_release": True}},
        override={"sglang_version": "0.5.4", "cuda_version": "12.9"},
    )
    assert problem.field == "sglang_version" and "flags were read" not in problem.message


# --- SSH host keys (finding 7) -----------------------------------------------------------


@pytest.mark.parametrize("value", ["no", "off", False])
def test_ssh_settings_that_accept_any_host_key_are_refused(tmp_path, value):
    problem = only_problem(tmp_path, {"gpu1": {"ssh_strict_host_key_checking": value}})
    assert (problem.host, problem.field) == ("gpu1", "ssh_strict_host_key_checking")
    assert "accepts any host key" in problem.message


@pytest.mark.parametrize("data", [{}, {"ssh_strict_host_key_checking": "accept-new"}])
def test_accept_new_is_a_warning_not_an_error(tmp_path, data):
    configs, problems, warnings = validate(tmp_path, {"gpu1": data})
    assert problems == [] and list(configs) == ["gpu1"]
    [warning] = warnings
    assert warning.startswith("warning: host gpu1: ssh_strict_host_key_checking = ")
    assert "accept-new" in warning and "docs/security.md" in warning


def test_strict_host_key_checking_yes_passes_quietly(tmp_path):
    configs, problems, warnings = validate(tmp_path, {"gpu1": SSH_YES})
    assert (list(configs), problems, warnings) == (["gpu1"], [], [])


def test_local_connector_hosts_are_not_ssh(tmp_path):
    configs, problems, warnings = validate(tmp_path, {"@local": {}})
    assert (list(configs), problems, warnings) == (["@local"], [], [])


# --- secret files (finding 13) ------------------------------------------------------------


def secret(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_bytes(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"sk-one\nsk-two\n", "more than one line"),
        (b"sk-one\r\nsk-two", "more than one line"),
        (b"\xff\xfe\x00binary", "not UTF-8 text"),
        (b"sk-\x00key", "non-printable"),
        (b"sk-\x1bkey", "non-printable"),
        (b"x" * (MAX_SECRET_BYTES + 1), f"larger than {MAX_SECRET_BYTES} bytes"),
        (b"  \n", "empty"),
    ],
)
def test_bad_secret_files_are_refused_naming_host_field_and_file(tmp_path, content, reason):
    path = secret(tmp_path, content)
    with pytest.raises(SecretFileError) as refused:
        read_secret(path, "sglang_api_key_file", "gpu1")
    message = str(refused.value)
    assert message.startswith(f"host gpu1: sglang_api_key_file: the API key file {path}: ")
    assert (
        reason in message and "sk-" not in message and refused.value.field == "sglang_api_key_file"
    )


def test_a_one_line_key_is_read_stripped_and_a_readable_file_warned_about(tmp_path):
    warnings: list[str] = []
    path = secret(tmp_path, b'  sk-test "quoted" back\\slash:#  \n', mode=0o640)
    assert read_secret(path, "hf_token_file", "gpu1", warnings.append) == (
        'sk-test "quoted" back\\slash:#'
    )
    [warning] = warnings
    assert "host gpu1: hf_token_file" in warning and "mode 0640" in warning
    assert "chmod 600" in warning and "sk-test" not in warning
    os.chmod(path, 0o600)
    other = tmp_path / "key2"
    other.write_text("sk-other\n")
    other.chmod(0o600)
    assert read_secret(other, "hf_token_file", "gpu1", warnings.append) == "sk-other"
    assert len(warnings) == 1


def test_a_folder_or_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SecretFileError, match="not a regular file|cannot read it"):
        read_secret(tmp_path, "sglang_router_api_key_file", "gpu1")
    with pytest.raises(SecretFileError, match="cannot read it: No such file"):
        read_secret(tmp_path / "missing", "sglang_router_api_key_file", "gpu1")


def test_validate_reads_the_secret_files_and_names_the_field(tmp_path):
    path = secret(tmp_path, b"sk-one\nsk-two\n")
    problem = only_problem(
        tmp_path,
        {
            "gpu1": {
                **SSH_YES,
                "sglang_host": "0.0.0.0",
                "sglang_metrics_public": True,
                "sglang_api_key_file": str(path),
            }
        },
    )
    assert (problem.host, problem.field, problem.value) == (
        "gpu1",
        "sglang_api_key_file",
        repr(str(path)),
    )
    assert "more than one line" in problem.message and "sk-one" not in str(problem)


def test_gitignore_keeps_secret_folders_out_of_git():
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().splitlines()
    assert "secrets/" in ignored


# --- unreadable inventories (finding 11) -------------------------------------------------


def test_a_binary_inventory_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "inv.py"
    path.write_bytes(b"\xff\xfe\x00\x01binary")
    with pytest.raises(InventoryFileError, match="not UTF-8 text"):
        load_inventory_file(str(path))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8 text" in err and "Traceback" not in err


def test_an_inventory_that_raises_names_its_line(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text("gpus = ['a']\nbroken = undefined_name\n")
    with pytest.raises(InventoryFileError, match=r"line 2\) raised NameError"):
        load_inventory_file(str(path))


# --- control planes open to whoever reaches them (findings 5 and 8) ----------------------


def test_a_multinode_group_on_public_addresses_is_refused_unless_trusted(tmp_path):
    # Before: validated; SGLang's inter-node transport unpickles what arrives over TCP.
    node = {**SSH_YES, "sglang_multinode_group": "pair", "sglang_model_profile": "dense-bf16"}
    hosts = {
        "gpu-a": {**node, "ssh_hostname": "1.2.3.4"},  # validated only: nothing is sent
        "gpu-b": {**node, "ssh_hostname": "10.0.0.2"},
    }
    _, problems, _ = validate(tmp_path, hosts, group="pair")
    assert {(p.host, p.field) for p in problems} == {
        ("gpu-a", "sglang_multinode_group"),
        ("gpu-b", "sglang_multinode_group"),
    }
    assert all("gpu-a (1.2.3.4)" in p.message for p in problems)
    assert all("sglang_multinode_trusted_network" in p.message for p in problems)

    trusted = {
        name: {**data, "sglang_multinode_trusted_network": True} for name, data in hosts.items()
    }
    (tmp_path / "trusted").mkdir()  # an inventory file of its own: pyinfra caches by path
    configs, problems, _ = validate(tmp_path / "trusted", trusted, group="pair")
    assert problems == [] and sorted(configs) == ["gpu-a", "gpu-b"]


def test_a_multinode_group_on_private_addresses_passes(tmp_path):
    node = {**SSH_YES, "sglang_multinode_group": "pair", "sglang_model_profile": "dense-bf16"}
    hosts = {
        "gpu-a": {**node, "ssh_hostname": "10.0.0.1"},
        "gpu-b": {**node, "ssh_hostname": "10.0.0.2"},
    }
    configs, problems, _ = validate(tmp_path, hosts, group="pair")
    assert problems == [] and sorted(configs) == ["gpu-a", "gpu-b"]


def test_public_metrics_need_saying_so(tmp_path):
    # Before: a 0.0.0.0 bind served /metrics and /health_generate with no key, unannounced.
    key = tmp_path / "api-key"
    key.write_text("sk-test-key\n")
    key.chmod(0o600)
    data = {
        **SSH_YES,
        "sglang_model_profile": "dense-bf16",
        "sglang_host": "0.0.0.0",
        "sglang_api_key_file": str(key),
    }
    problem = only_problem(tmp_path, {"gpu1": data})
    assert (problem.field, problem.value) == ("sglang_host", "0.0.0.0")
    assert "/metrics" in problem.message and "sglang_metrics_public" in problem.message
    for index, allowed in enumerate(
        ({"sglang_metrics_public": True}, {"sglang_profile_overrides": {"enable_metrics": False}})
    ):
        folder = tmp_path / f"allowed{index}"  # an inventory file of its own: loaded afresh
        folder.mkdir()
        configs, problems, _ = validate(folder, {"gpu1": {**data, **allowed}})
        assert problems == [] and list(configs) == ["gpu1"], allowed


# --- the multi-node firewall (finding 5) ---------------------------------------------------


def test_the_firewall_needs_member_addresses_it_can_admit(tmp_path):
    # The firewall admits members by address: a name would resolve only at load time, to
    # whatever DNS says then.
    node = {**SSH_YES, "sglang_multinode_group": "pair", "sglang_model_profile": "dense-bf16"}
    hosts = {"gpu-a": {**node, "ssh_hostname": "10.0.0.1"}, "gpu-b": node}
    _, problems, _ = validate(tmp_path, hosts, group="pair")
    assert {(p.host, p.field) for p in problems} == {
        ("gpu-a", "sglang_multinode_firewall"),
        ("gpu-b", "sglang_multinode_firewall"),
    }
    assert all("gpu-b (gpu-b)" in p.message for p in problems)

    off = {name: {**data, "sglang_multinode_firewall": False} for name, data in hosts.items()}
    (tmp_path / "off").mkdir()
    configs, problems, _ = validate(tmp_path / "off", off, group="pair")
    assert problems == [] and sorted(configs) == ["gpu-a", "gpu-b"]


def test_a_serving_port_the_firewall_would_close_is_refused(tmp_path):
    node = {**SSH_YES, "sglang_multinode_group": "pair", "sglang_model_profile": "dense-bf16"}
    hosts = {
        "gpu-a": {**node, "ssh_hostname": "10.0.0.1", "sglang_port": 40000},
        "gpu-b": {**node, "ssh_hostname": "10.0.0.2"},
    }
    problem = only_problem(tmp_path, hosts, group="pair")
    assert (problem.host, problem.field) == ("gpu-a", "sglang_port")
    assert "40000" in problem.message and "32768-60999" in problem.message


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:30080", "http://localhost:30080/", "http://[::1]:30080"]
)
def test_a_worker_url_that_is_the_router_itself_is_refused(url):
    """Issue 35 N11: a proxy loop was accepted."""
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("r", {"sglang_router_worker_urls": [url]})
    assert problem.field == "sglang_router_worker_urls"
    assert "the router's own address" in problem.message
    _, problems = validate_host_data("r", {"sglang_router_worker_urls": ["http://127.0.0.1:30000"]})
    assert problems == []


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"tune_settings": []}, "tune_settings"),
        ({"sglang_rolling_batch": True}, "sglang_rolling_batch"),
    ],
)
def test_values_the_tuner_or_deploy_would_trip_on_are_refused_by_validate(values, field):
    """Issue 35 N11: an empty search and true as a batch size passed validate."""
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("h", values)
    assert problem.field == field


def test_an_ssh_hostname_with_a_newline_is_named_as_itself():
    """Issue 35 N11: it was reported under sglang_model_profile, where it failed to render."""
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("h", {"ssh_hostname": "10.0.0.1\nExecStart=/bin/sh"})
    assert (problem.field, problem.message) == ("ssh_hostname", "not a host name or address")


@pytest.mark.parametrize("value", ["yes", "no", 1, 0])
def test_a_switch_takes_true_or_false_only(value):
    """Issue 35 N11: tune_keep = "yes" passed as true (pyinfra's --data turns the words
    true and false into booleans already)."""
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("h", {"tune_keep": value})
    assert problem.field == "tune_keep" and problem.allowed == "true, false"


def test_a_host_asked_to_be_tuned_needs_repeats_as_the_tuner_does():
    """Issue 35 N11: bench_repeat = 1 passed validate and was refused only by deploy/tune.py."""
    from pyinfra_sglang.inventory import validate_host_data

    _, [problem] = validate_host_data("h", {"tune_settings": ["cuda_graph"], "bench_repeat": 1})
    assert problem.field == "bench_repeat" and "deploy/tune.py cannot tell" in problem.message
    _, problems = validate_host_data("h", {"tune_settings": ["cuda_graph"], "bench_repeat": 2})
    assert problems == []
    assert validate_host_data("h", {"bench_repeat": 1})[1] == []  # no search asked for
