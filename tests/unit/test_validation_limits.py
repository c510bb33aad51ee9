"""Bad values refused before anything changes, with the host, the field, the value and what is
allowed: tensor-parallel sizes the model's heads cannot be split over, timeouts systemd would
ignore, flags smuggled in as values, scoped IPv6 firewall members; and no secret of the host's
data in any problem's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyinfra_sglang.inventory import (
    InventoryError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.serving.placement import (
    GpuFitError,
    GpuSet,
    TensorParallelError,
    check_fit,
    place,
    tp_size_for,
)
from pyinfra_sglang.serving.profiles import (
    ProfileError,
    allowed_tp_sizes,
    load_profile,
    merge_overrides,
    tp_size_allowed,
)

SSH_YES = {"ssh_strict_host_key_checking": "yes"}
SECRET = "s3cret"


def validate(folder: Path, hosts: dict[str, dict], group: str = "gpus"):
    """The problems of an inventory of ``hosts`` (name -> host data) in one group."""
    # A new file each time: pyinfra caches a compiled inventory by its file name.
    path = folder / f"inv{len(list(folder.glob('inv*.py')))}.py"
    entries = ", ".join(f"({name!r}, {data!r})" for name, data in hosts.items())
    path.write_text(f"{group} = [{entries}]\n")
    try:
        validate_inventory(load_inventory_file(str(path)), warn=lambda _: None)
    except InventoryError as error:
        return error.problems
    return []


def only_problem(folder: Path, hosts: dict[str, dict], group: str = "gpus"):
    problems = validate(folder, hosts, group)
    assert len(problems) == 1, problems
    return problems[0]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# --- 1. tensor-parallel sizes the heads allow --------------------------------------------


@pytest.mark.parametrize("name", ["glm-5-nvfp4", "glm-5-nvfp4-dense"])
def test_glm5_profiles_know_their_attention_heads(name):
    profile = load_profile(name)
    assert profile.num_attention_heads == 64
    assert allowed_tp_sizes(profile, 8) == [1, 2, 4, 8]


@pytest.mark.parametrize(("gpus", "allowed"), [(3, "1, 2"), (5, "1, 2, 4"), (6, "1, 2, 4")])
def test_a_gpu_count_that_does_not_split_glm5s_heads_is_refused(tmp_path, gpus, allowed):
    data = {**SSH_YES, "sglang_model_profile": "glm-5-nvfp4", "expected_gpu_count": gpus}
    problem = only_problem(tmp_path, {"gpu1": data})
    assert (problem.host, problem.field, problem.value) == ("gpu1", "expected_gpu_count", str(gpus))
    assert "64 attention heads do not split over" in problem.message
    assert f"the sizes that do, up to {gpus} GPUs: {allowed})" in problem.message


def test_the_refusal_names_the_sizes_that_hold_the_model_too():
    glm = load_profile("glm-5-nvfp4")
    with pytest.raises(TensorParallelError) as error:
        tp_size_for(glm, 6, gpu_memory_gb=180)
    assert "set tp_size (sglang_profile_overrides) to 4, or use 8 GPUs" in str(error.value)
    # 6 x 96 GB: neither 1, 2 nor 4 of them hold GLM-5 (460.8 GB of weights, plus KV cache).
    with pytest.raises(TensorParallelError) as error:
        tp_size_for(glm, 6, gpu_memory_gb=96)
    assert "none of them holds the profile on 96 GB GPUs (at 4, it does not fit" in str(error.value)
    assert str(error.value).endswith(": use 8 GPUs")
    assert tp_size_for(glm, 8) == 8 and tp_size_for(glm, 8, nnodes=2) == 16


def test_a_dense_model_with_its_heads_set_is_checked(tmp_path):
    overrides = {"num_attention_heads": 32, "num_key_value_heads": 8}
    data = {**SSH_YES, "sglang_model_profile": "dense-bf16", "sglang_profile_overrides": overrides}
    problem = only_problem(tmp_path, {"gpu1": {**data, "expected_gpu_count": 6}})
    assert problem.field == "expected_gpu_count"
    assert "32 attention heads and 8 KV heads do not split over 6 ranks" in problem.message
    assert validate(tmp_path, {"gpu1": {**data, "expected_gpu_count": 4}}) == []
    # Unset heads: unchecked, as before.
    dense = {**SSH_YES, "sglang_model_profile": "dense-bf16", "expected_gpu_count": 6}
    assert validate(tmp_path, {"gpu1": dense}) == []


def test_kv_heads_allow_divisors_and_multiples():
    profile = merge_overrides(
        load_profile("dense-bf16"), {"num_attention_heads": 32, "num_key_value_heads": 8}
    )
    assert allowed_tp_sizes(profile) == [1, 2, 4, 8, 16, 32]
    assert not tp_size_allowed(profile, 3) and not tp_size_allowed(profile, 12)


def test_a_tp_size_override_that_does_not_split_the_heads_is_refused(tmp_path):
    data = {
        **SSH_YES,
        "sglang_model_profile": "glm-5-nvfp4",
        "expected_gpu_count": 8,
        "sglang_profile_overrides": {"tp_size": 6},
    }
    problem = only_problem(tmp_path, {"gpu1": data})
    assert problem.field == "sglang_profile_overrides" and problem.value == "{'tp_size': 6}"
    assert "tp_size 6 does not split the model's 64 attention heads" in problem.message
    assert "allowed sizes: 1, 2, 4, 8, 16, 32, 64" in problem.message


def test_the_fit_error_suggests_only_gpu_counts_that_split_the_heads():
    # GLM-5 on 96 GB GPUs: 6 would hold it, but 64 heads cannot be split over 6.
    with pytest.raises(GpuFitError) as error:
        check_fit(load_profile("glm-5-nvfp4"), 4, 96)
    message = str(error.value)
    assert "6 GPUs" not in message
    assert "Use 8 GPUs of 96 GB" in message and "8, 16, 32, 64 hold it" in message
    # A profile without heads: the plain count, as before.
    with pytest.raises(GpuFitError, match=r"Use at least 2 GPUs of 16 GB"):
        check_fit(load_profile("dense-bf16"), 1, 16)


def test_a_tp_size_below_the_gpu_count_must_hold_the_model_itself():
    profile = merge_overrides(load_profile("glm-5-nvfp4"), {"tp_size": 4})
    gpus = GpuSet(count=6, memory_gb=96, arch="sm_120")
    with pytest.raises(GpuFitError, match=r"does not fit 4 x 96 GB.*tp_size 4 uses 4 of 6 GPUs"):
        place(profile, gpus, sglang_version="0.5.23")


def test_glm5_without_a_gpu_count_still_validates(tmp_path):
    # The fewest B200s that hold GLM-5 are 3, which 64 heads cannot use: validation plans 4.
    data = {**SSH_YES, "sglang_model_profile": "glm-5-nvfp4"}
    assert validate(tmp_path, {"gpu1": data}) == []


# --- 2. timeouts systemd accepts ------------------------------------------------------------


@pytest.mark.parametrize("field", ["start_timeout_s", "drain_timeout_s", "watchdog_timeout_s"])
def test_timeouts_beyond_a_day_are_refused(tmp_path, field):
    data = {**SSH_YES, "sglang_profile_overrides": {field: 10**12}}
    problem = only_problem(tmp_path, {"gpu1": data})
    assert problem.field == "sglang_profile_overrides"
    assert f"{field} = 1000000000000" in problem.message
    assert "less than or equal to 86400" in problem.message
    merge_overrides(load_profile("dense-bf16"), {field: 86400})
    with pytest.raises(ProfileError, match="less than or equal to 86400"):
        merge_overrides(load_profile("dense-bf16"), {field: 86401})


# --- 3. flags smuggled in as values ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tokenizer-path", "-x"], "'-x' starts with '-'"),
        (["--tokenizer-path", "-api-key"], "'-api-key' starts with '-'"),
        (["--tokenizer-path=--api-key"], "--tokenizer-path's value starts with '-'"),
        (["--log-level=-x"], "--log-level's value starts with '-'"),
    ],
)
def test_extra_arg_values_starting_with_a_dash_are_refused(tmp_path, args, named):
    data = {**SSH_YES, "sglang_profile_overrides": {"extra_args": args}}
    problem = only_problem(tmp_path, {"gpu1": data})
    assert problem.field == "sglang_profile_overrides" and named in problem.message


def test_negative_numbers_and_flags_of_their_own_pass():
    args = ["--random-seed", "-1", "--max-queued-requests=-1", "--enable-foo", "--", "x"]
    assert merge_overrides(load_profile("dense-bf16"), {"extra_args": args}).extra_args == args


# --- 4. no secret in a problem -------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"pypi_index_url": f"ftp://user:{SECRET}@index.example/simple"},
        {"pypi_index_url": f"https://user:{SECRET}@index.example/simple\n"},
        {"hf_endpoint": f"https://user:{SECRET}@hub.example\t"},
        {"nvidia_apt_mirror": f"http://user:{SECRET}@mirror.example/cuda"},  # no keyring pin
        {"torch_index_url": f"https://{SECRET}@torch.example/whl\n"},  # a token as the user
    ],
)
def test_url_credentials_are_never_shown(values):
    config, problems = validate_host_data("gpu1", values)
    assert config is None and problems
    for problem in problems:
        assert SECRET not in str(problem)
    shown = [p for p in problems if p.field in values]
    assert shown and all("://********@" in p.value for p in shown), shown


@pytest.mark.parametrize(
    "extra_args",
    [
        ["--api-key", SECRET],
        ["--api-key=" + SECRET],
        ["--api-k", SECRET],
        ["--admin-api-key", SECRET],
    ],
)
def test_an_api_key_in_extra_args_is_never_shown(tmp_path, extra_args):
    for field in ("sglang_profile_overrides", "bench_ab_overrides"):
        data = {**SSH_YES, field: {"extra_args": extra_args}}
        problems = validate(tmp_path, {"gpu1": data})
        assert problems and all(SECRET not in str(p) for p in problems), problems
        assert any("must not be on the command line" in p.message for p in problems)


# --- 5. firewall members by plain address ---------------------------------------------------


def test_scoped_ipv6_firewall_members_are_refused(tmp_path):
    node = {**SSH_YES, "sglang_multinode_group": "pair", "sglang_model_profile": "dense-bf16"}
    hosts = {
        "gpu-a": {**node, "ssh_hostname": "fd00::1"},
        "gpu-b": {**node, "ssh_hostname": "fe80::2%eth0"},
    }
    problems = [p for p in validate(tmp_path, hosts, group="pair") if "scoped" in p.message]
    assert {p.host for p in problems} == {"gpu-a", "gpu-b"}
    problem = problems[0]
    assert problem.field == "sglang_multinode_firewall"
    assert "gpu-b (fe80::2%eth0)" in problem.message and "plain addresses" in problem.message
    # Without the firewall there is no nftables set to put it in.
    off = {name: {**data, "sglang_multinode_firewall": False} for name, data in hosts.items()}
    assert not [p for p in validate(tmp_path, off, group="pair") if "scoped" in p.message]


# --- 6. host names and addresses that would add lines or words to root-loaded files ---------

HOSTILE_NAMES = [
    "gpu-1\nflush ruleset",
    "gpu-1\r\n[Service]\nExecStartPre=/bin/touch /tmp/x",
    "gpu 1",
    'gpu"1',
    "gpu-1}",
    "$(touch${IFS}/tmp/x)",
    "fe80::1%eth0 } ; drop",
    "-gpu",
    "a" * 64 + ".example",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_host_name_is_refused(tmp_path, name):
    problem = only_problem(tmp_path, {name: SSH_YES})
    assert (problem.field, problem.host, problem.value) == ("host name", repr(name), repr(name))
    assert "not a host name, IP address or pyinfra connector" in problem.message
    assert "\n" not in str(problem)  # the name is shown as a repr, one line


@pytest.mark.parametrize("name", ["gpu-1", "gpu_1.example.internal", "10.0.0.7", "fd00::7"])
def test_ordinary_host_names_pass(tmp_path, name):
    assert validate(tmp_path, {name: SSH_YES}) == []


SCOPED = 'fe80::1%x" }$(id)'


@pytest.mark.parametrize(
    "field",
    [
        "sglang_host",
        "sglang_router_host",
        "monitoring_listen_address",
        "monitoring_exporter_address",
        "monitoring_scrape_address",
    ],
)
def test_no_address_field_takes_a_scope_id(field):
    config, problems = validate_host_data("gpu-1", {field: SCOPED})
    assert config is None
    [problem] = problems
    assert problem.field == field and "has a scope id" in problem.message
    # An interface name is still a zone, and still refused: no rendered file takes one.
    _, problems = validate_host_data("gpu-1", {field: "fe80::1%eth0"})
    assert [p.field for p in problems] == [field]


def test_ssh_hostname_takes_an_interface_zone_only():
    assert validate_host_data("gpu-1", {"ssh_hostname": "fe80::2%eth0"})[1] == []
    for hostile in (SCOPED.replace(" ", ""), "fe80::2%eth0;id", "gpu-1\n", "gpu$(id)"):
        [problem] = validate_host_data("gpu-1", {"ssh_hostname": hostile})[1]
        assert problem.field == "ssh_hostname" and "interface name" in problem.allowed
