"""The inventory model: defaults, examples, and one clear message per bad value."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.config.reference import with_reference
from pyinfra_sglang.inventory import (
    HostConfig,
    InventoryError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)

REPO = Path(__file__).resolve().parents[2]


def test_defaults_need_no_data():
    config = HostConfig()
    assert config.nvidia_driver_branch == 590
    assert config.nvidia_kernel_modules == "open"
    assert config.cuda_version == "13.1"
    assert str(config.sglang_host) == "127.0.0.1" and config.sglang_port == 30000
    assert config.allow_reboot is False
    assert config.sglang_api_key_file is None and config.hf_token_file is None
    assert str(config.pypi_index_url) == "https://pypi.org/simple"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Where pyinfra runs: the secret files the example inventories point at (0600), and
    their known_hosts pre-seeded with a key for every example host (docs/security.md)."""
    (tmp_path / "secrets").mkdir()
    for name, text in (("sglang-api-key", "sk-example-0123\n"), ("hf-token", "hf_example\n")):
        (tmp_path / "secrets" / name).write_text(text)
        (tmp_path / "secrets" / name).chmod(0o600)
    key = tmp_path / "host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30
    )
    public = " ".join((tmp_path / "host_key.pub").read_text().split()[:2])
    names = sorted(
        {
            str(host.data.get("ssh_hostname") or host.name)
            for path in (REPO / "inventories").glob("*.py")
            for host in load_inventory_file(str(path))
        }
    )
    (tmp_path / "known_hosts").write_text("".join(f"{name} {public}\n" for name in names))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_example_single_host_inventory_validates(site):
    warnings = []
    inventory = load_inventory_file(str(REPO / "inventories" / "example.py"))
    configs = validate_inventory(inventory, warn=warnings.append)
    [(name, config)] = configs.items()
    assert name == "gpu-pcie-01.example.internal"
    assert config.expected_gpu_count == 8
    assert config.sglang_model_profile == "glm-5-nvfp4"
    assert str(config.sglang_host) == "0.0.0.0" and config.sglang_api_key_file is not None
    # Host keys are checked against a pre-seeded known_hosts file: nothing to warn about.
    [host] = list(inventory)
    assert host.data.ssh_strict_host_key_checking == "yes" and host.data.ssh_known_hosts_file
    assert warnings == []


def test_example_multinode_inventory_validates_with_group_data(site):
    warnings = []
    inventory = load_inventory_file(str(REPO / "inventories" / "multinode.py"))
    configs = validate_inventory(inventory, warn=warnings.append)
    assert sorted(configs) == ["gpu-node-01.example.internal", "gpu-node-02.example.internal"]
    # Both hosts take their settings from group_data/glm5_pair.py, SSH settings included.
    assert {c.expected_gpu_count for c in configs.values()} == {8}
    assert all(h.groups[0] == "glm5_pair" for h in inventory)
    assert {h.data.ssh_strict_host_key_checking for h in inventory} == {"yes"}
    assert {c.sglang_multinode_group for c in configs.values()} == {"glm5_pair"}
    assert all(c.sglang_multinode_firewall for c in configs.values())
    assert warnings == []


# The host shapes of docs/hosts.md: a rented HGX host on its provider's driver, a Blackwell
# HGX host on the deploy's own.
HOST_SHAPE_EXAMPLES = {
    "h100-sxm-rented.py": (
        "h100-sxm-01.example.internal",
        {
            "nvidia_driver_source": "host",
            "cuda_version": "13.0",
            "sglang_model_profile": "dense-bf16",
        },
    ),
    "b200-hgx.py": (
        "b200-hgx-01.example.internal",
        {
            "nvidia_driver_source": "managed",
            "nvidia_driver_branch": 595,
            "nvidia_kernel_modules": "open",
            "sglang_model_profile": "glm-5-nvfp4",
        },
    ),
}


@pytest.mark.parametrize("file_name", sorted(HOST_SHAPE_EXAMPLES))
def test_host_shape_examples_validate_and_render(site, capsys, file_name):
    path = str(REPO / "inventories" / file_name)
    host_name, expected = HOST_SHAPE_EXAMPLES[file_name]
    warnings = []
    configs = validate_inventory(load_inventory_file(path), warn=warnings.append)
    [(name, config)] = configs.items()
    assert name == host_name and config.expected_gpu_count == 8
    assert {field: getattr(config, field) for field in expected} == expected
    assert warnings == []
    # What the host would get, as `pyinfra-sglang render --inventory` prints it.
    assert main(["render", "--inventory", path, "--inventory-host", host_name, "--json"]) == 0
    rendered = json.loads(capsys.readouterr().out)
    [unit] = [f for f in rendered["files"] if f["path"] == "/etc/systemd/system/sglang.service"]
    assert "--tp-size 8" in unit["content"]


def test_example_inventories_need_their_secret_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no secrets/ here
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file(str(REPO / "inventories" / "example.py")))
    problems = sorted(caught.value.problems, key=lambda problem: problem.field)
    # The Hub token is an optional comment in the example (for a gated model).
    assert [p.field for p in problems] == ["sglang_api_key_file"]
    assert all("cannot read it: No such file or directory" in p.message for p in problems)
    assert problems[0].value == "'secrets/sglang-api-key'"


def problems_for(values: dict, sources: dict | None = None):
    config, problems = validate_host_data("gpu1", values, sources)
    assert config is None
    return problems


@pytest.mark.parametrize(
    ("values", "field", "shown", "message", "allowed"),
    [
        ({"sglang_port": "http"}, "sglang_port", "'http'", "valid integer", "1..65535"),
        ({"sglang_port": 70000}, "sglang_port", "70000", "less than or equal to 65535", "1..65535"),
        ({"nvidia_driver_branch": 470}, "nvidia_driver_branch", "470", "615 or 620", "595, 610"),
        ({"cuda_version": "11.8"}, "cuda_version", "'11.8'", "'13.1'", "13.1"),
        (
            {"nvidia_driver_install": "desktop"},
            "nvidia_driver_install",
            "'desktop'",
            "'compute'",
            "compute, full",
        ),
        (
            {"nvidia_kernel_modules": "closed"},
            "nvidia_kernel_modules",
            "'closed'",
            "'open'",
            "open, proprietary",
        ),
        ({"allow_reboot": "maybe"}, "allow_reboot", "'maybe'", "valid boolean", "true, false"),
        (
            {"expected_gpu_count": 0},
            "expected_gpu_count",
            "0",
            "greater than or equal to 1",
            "1..64",
        ),
        ({"nvidia_apt_mirror": "ftp:/x"}, "nvidia_apt_mirror", "'ftp:/x'", "URL", "http(s) URL"),
        ({"sglang_version": "latest"}, "sglang_version", "'latest'", "pattern", "0.5.23"),
        ({"audit_dcgm_level": 4}, "audit_dcgm_level", "4", "1, 2 or 3", "1, 2, 3"),
        ({"audit_dcgm_level": True}, "audit_dcgm_level", "True", "", "1, 2, 3"),
    ],
)
def test_bad_value_names_host_field_value_and_allowed(values, field, shown, message, allowed):
    [problem] = problems_for(values, {field: "group gpu_servers"})
    text = str(problem)
    assert text.startswith(f"host gpu1: {field} = {shown} (from group gpu_servers): ")
    assert message in text
    assert re.search(r"; allowed: .*" + re.escape(allowed), text)


def test_unknown_key_is_an_error_with_a_suggestion_and_no_value():
    [problem] = problems_for({"hf_tokne_file": "hf_SECRETSECRET"})
    assert problem.field == "hf_tokne_file" and problem.message == "unknown key"
    assert "did you mean hf_token_file?" in problem.allowed
    assert "hf_SECRETSECRET" not in str(problem)


def test_pyinfra_keys_and_own_prefixed_keys_pass():
    values = {
        "ssh_user": "root",
        "ssh_known_hosts_file": "/etc/ssh/known",
        "_sudo": True,
        "x_rack": "b12",
        "sglang_port": 30001,
    }
    config, problems = validate_host_data("gpu1", values)
    assert problems == [] and config is not None and config.sglang_port == 30001


def test_public_bind_without_api_key_is_refused():
    [problem] = problems_for({"sglang_host": "0.0.0.0"})
    assert problem.field == "sglang_host"
    assert "without an API key" in problem.message and "sglang_api_key_file" in problem.message


def test_empty_key_file_means_unset():
    [problem] = problems_for({"sglang_host": "10.0.0.5", "sglang_api_key_file": ""})
    assert problem.field == "sglang_host"


def test_cli_style_values_are_read_as_meant():
    # pyinfra's --data parses "590" to an int and '"13.1"' (quoted) to the text 13.1.
    config, problems = validate_host_data(
        "gpu1",
        {"cuda_version": "13.1", "nvidia_driver_branch": "590", "sglang_version": "0.5.9.post1"},
    )
    assert problems == [] and config.cuda_version == "13.1" and config.nvidia_driver_branch == 590


def test_all_problems_of_all_hosts_in_one_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.py").write_text(
        "gpus = [\n"
        "    ('a', {'sglang_port': 0}),\n"
        "    ('b', {'sglang_prot': 1, 'allow_reboot': True}),\n"
        "    ('c', {}),\n"
        "]\n"
    )
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file("inv.py", override_data={"cuda_version": "9.0"}))
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("invalid inventory, nothing was changed")
    fields = sorted((p.host, p.field, p.source) for p in caught.value.problems)
    assert fields == [
        ("a", "cuda_version", "--data"),
        ("a", "sglang_port", "host data"),
        ("b", "cuda_version", "--data"),
        ("b", "sglang_prot", "host data"),
        ("c", "cuda_version", "--data"),
    ]


def test_group_data_source_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "gpus.py").write_text("sglang_port = 123456\n")
    (tmp_path / "inv.py").write_text("gpus = ['a']\n")
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file("inv.py"))
    [problem] = caught.value.problems
    assert (problem.host, problem.field, problem.source) == ("a", "sglang_port", "group gpus")


def test_docs_inventory_reference_matches_the_model():
    reference = (REPO / "docs" / "inventory.md").read_text()
    block = re.search(
        r"<!-- inventory-reference:start -->\n(.*?)<!-- inventory-reference:end -->",
        reference,
        re.S,
    )
    assert block, "docs/inventory.md lacks the generated inventory reference block"
    assert with_reference(reference) == reference, (
        "docs/inventory.md's inventory reference is stale: run "
        "`uv run pyinfra-sglang inventory-reference --write docs/inventory.md`"
    )
    for field in HostConfig.model_fields:
        assert f"`{field}`" in block.group(1)


def test_profile_flags_missing_in_the_pinned_release_are_inventory_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.py").write_text(
        "gpus = [\n"
        "    ('old', {'sglang_version': '0.5.8'}),\n"
        "    ('typo', {'sglang_model_profile': 'glm-5-fp4'}),\n"
        "    ('bad-override', {'sglang_profile_overrides': {'mem_fraction_static': 2}}),\n"
        "    ('ok', {'sglang_model_profile': 'dense-bf16'}),\n"
        "]\n"
    )
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file("inv.py"))
    by_host = {p.host: p for p in caught.value.problems}
    assert sorted(by_host) == ["bad-override", "old", "typo"]
    assert by_host["old"].field == "sglang_version" and "0.5.8" in by_host["old"].message
    assert by_host["typo"].field == "sglang_model_profile"
    assert "did you mean glm-5-nvfp4" in by_host["typo"].message
    assert by_host["bad-override"].field == "sglang_profile_overrides"
    assert "mem_fraction_static" in by_host["bad-override"].message


def test_multinode_group_must_be_one_of_the_hosts_groups(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.py").write_text(
        "pair = [('a', {'sglang_multinode_group': 'pair', 'ssh_hostname': '10.0.0.1'}), "
        "('b', {'sglang_multinode_group': 'trio', 'ssh_hostname': '10.0.0.2'})]\n"
    )
    with pytest.raises(InventoryError) as caught:
        validate_inventory(load_inventory_file("inv.py"))
    [problem] = caught.value.problems
    assert (problem.host, problem.field) == ("b", "sglang_multinode_group")
    assert "not in group trio" in problem.message
