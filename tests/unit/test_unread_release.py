"""An SGLang release outside what the data was read for (data/sglang_flags.toml [versions]:
the flag spellings, and with a router the router pins) is refused, unless
sglang_allow_unread_release accepts it; then it renders with the spellings read and warns."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.config.releases_read import read_releases, unread_release
from pyinfra_sglang.inventory import (
    InventoryError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.serving import sglang_flags
from pyinfra_sglang.serving.service_files import router_requirements
from pyinfra_sglang.versions import Version, parse_version
from tests.unit.test_render import placed_args

ROUTED = {"sglang_router_worker_urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]}
ALLOW = {"sglang_allow_unread_release": True}
ALLOWED = (
    "a release from 0.5.5 to 0.5.23 (the releases read: data/sglang_flags.toml [versions]) "
    "such as 0.5.23 or 0.5.9.post1; another only with sglang_allow_unread_release"
)
NEWER = (
    "SGLang 0.5.24 is newer than the newest release whose flags were read (0.5.5 .. 0.5.23, "
    "pyinfra_sglang/data/sglang_flags.toml [versions]): its server may spell them otherwise. "
    "To extend it: add the release to tests/compat/sglang_versions.toml, run "
    "tests/compat/test_sglang_argparse.py, fix the spellings it fails on and widen [versions] "
    "in pyinfra_sglang/data/sglang_flags.toml; or set sglang_allow_unread_release: it renders "
    "with the spellings of 0.5.23, unchecked against its parser"
)


def test_the_read_range_is_the_flag_tables():
    assert read_releases() == (Version(0, 5, 5), Version(0, 5, 23))


def test_a_newer_release_is_refused_with_the_range_and_how_to_extend_it():
    config, [problem] = validate_host_data("gpu1", {"sglang_version": "0.5.24"}, {})
    assert config is None
    assert str(problem) == (
        f"host gpu1: sglang_version = '0.5.24' (from default): {NEWER}; allowed: {ALLOWED}"
    )


def test_an_older_release_is_refused_the_same_way():
    _, [problem] = validate_host_data(
        "gpu1", {"sglang_version": "0.5.4"}, {"sglang_version": "--data"}
    )
    assert (problem.field, problem.value, problem.source) == ("sglang_version", "'0.5.4'", "--data")
    assert problem.message.startswith(
        "SGLang 0.5.4 is older than the oldest release whose flags were read (0.5.5 .. 0.5.23"
    )
    assert "the spellings of 0.5.5, unchecked" in problem.message


def cuda_for(version: str) -> dict:
    """A CUDA release the version installs for (data/python.toml [sglang]: torch before
    0.5.6 has no CUDA 13 build), so only the read range decides."""
    return {"cuda_version": "12.9" if parse_version(version) < Version(0, 5, 6) else "13.1"}


@pytest.mark.parametrize("version", ["0.5.5", "0.5.5.post1", "0.5.9", "0.5.23"])
def test_the_releases_read_pass(version):
    values = {"sglang_version": version, **cuda_for(version)}
    config, problems = validate_host_data("gpu1", values)
    assert problems == [] and config.sglang_version == version
    config, problems = validate_host_data("gpu1", {**values, **ROUTED})
    assert problems == []


@pytest.mark.parametrize("version", ["0.5.4", "0.5.4.post9", "0.5.23.post1", "0.5.24", "0.6.0"])
def test_the_releases_beyond_are_refused(version):
    values = {"sglang_version": version, **cuda_for(version)}
    config, [problem] = validate_host_data("gpu1", values)
    assert config is None and problem.field == "sglang_version"
    assert "sglang_allow_unread_release" in problem.message
    # Accepted, the flags refuse it no more (a release older than every Python stack read
    # stays refused by that check: data/python.toml [sglang]).
    config, problems = validate_host_data("gpu1", {**values, **ALLOW})
    assert not any("flags were read" in p.message for p in problems)
    if parse_version(version) > Version(0, 5, 23):
        assert problems == [] and config.sglang_allow_unread_release is True


def test_the_default_inventory_is_inside_the_range():
    config, problems = validate_host_data("gpu1", {})
    assert problems == [] and config.sglang_allow_unread_release is False
    assert unread_release(config.sglang_version, routed=True) is None


def validate(folder: Path, host: dict, override: dict | None = None):
    (folder / "inv.py").write_text(f"gpus = [('gpu1', {host!r})]\n")
    warnings: list[str] = []
    try:
        configs = validate_inventory(
            load_inventory_file(str(folder / "inv.py"), override), warnings.append
        )
    except InventoryError as error:
        return {}, error.problems, warnings
    return configs, [], warnings


SSH_YES = {"ssh_strict_host_key_checking": "yes", "sglang_model_profile": "dense-bf16"}


def test_an_accepted_release_validates_warns_and_renders_with_the_newest_spellings(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    configs, problems, [warning] = validate(
        tmp_path, {**SSH_YES, **ALLOW}, {"sglang_version": "0.5.99"}
    )
    assert problems == [] and list(configs) == ["gpu1"]
    assert warning == (
        "warning: host gpu1: sglang_version = '0.5.99' (from --data): SGLang 0.5.99 is newer "
        "than the newest release whose flags were read (0.5.5 .. 0.5.23, "
        "pyinfra_sglang/data/sglang_flags.toml [versions]): its server may spell them "
        "otherwise; sglang_allow_unread_release accepts it: it renders with the spellings of "
        "0.5.23, unchecked against its parser"
    )
    # Every flag as 0.5.23 spells it (the GLM-5 profile asks for the renamed ones).
    from pyinfra_sglang.serving.profiles import load_profile

    profile = load_profile("glm-5-nvfp4")
    args = ("127.0.0.1", 30000, "/etc/sglang/config.yaml")
    assert placed_args(profile, "0.5.99", 8, *args) == placed_args(profile, "0.5.23", 8, *args)


def test_a_release_inside_the_range_does_not_warn_even_when_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    configs, problems, warnings = validate(tmp_path, {**SSH_YES, **ALLOW})
    assert problems == [] and warnings == []


def pins_read_up_to(monkeypatch, release: str) -> None:
    """data/sglang_flags.toml as if the router pins were read up to ``release`` only."""
    flags = data.sglang_flags()
    versions = flags.versions.model_copy(update={"router_pins_read": release})
    patched = flags.model_copy(update={"versions": versions})
    monkeypatch.setattr(sglang_flags.data, "sglang_flags", lambda: patched)


def test_a_routed_release_beyond_the_router_pins_read_is_refused(monkeypatch):
    pins_read_up_to(monkeypatch, "0.5.22")
    # Without a router the pins do not matter.
    assert validate_host_data("gpu1", {"sglang_version": "0.5.23"})[1] == []
    _, [problem] = validate_host_data("gpu1", {"sglang_version": "0.5.23", **ROUTED})
    assert problem.field == "sglang_version"
    assert problem.message == (
        "SGLang 0.5.23 is newer than the newest release the router pins were read for "
        "(0.5.22, router_pins_read in pyinfra_sglang/data/sglang_flags.toml [versions]; pins: "
        "pyinfra_sglang/data/python.toml [router]): its gateway release may differ. To extend "
        "it: pin the gateway release that goes with it in pyinfra_sglang/data/python.toml "
        "[router], check its command line with tests/compat/test_smg_args.py and raise "
        "router_pins_read; or set sglang_allow_unread_release: it runs the newest pin's "
        "gateway, smg 1.13.0, unchecked against that SGLang release"
    )
    config, problems = validate_host_data("gpu1", {"sglang_version": "0.5.23", **ROUTED, **ALLOW})
    assert problems == [] and router_requirements(config.sglang_version) == {"smg": "1.13.0"}


def test_a_routed_accepted_release_warns_about_the_router(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pins_read_up_to(monkeypatch, "0.5.22")
    host = {**SSH_YES, **ROUTED, **ALLOW}
    configs, problems, [warning] = validate(tmp_path, host)
    assert problems == [] and list(configs) == ["gpu1"]
    assert warning.startswith(
        "warning: host gpu1: sglang_version = '0.5.23' (from default): SGLang 0.5.23 is newer "
        "than the newest release the router pins were read for (0.5.22"
    )
    assert warning.endswith(
        "sglang_allow_unread_release accepts it: it runs the newest pin's gateway, smg 1.13.0, "
        "unchecked against that SGLang release"
    )


def test_the_router_pins_were_read_as_far_as_the_flags():
    # Today both were read up to 0.5.23: the flag table's range speaks first.
    versions = data.sglang_flags().versions
    assert versions.router_pins_read == versions.newest_read
    newest_pin = max(parse_version(pin.sglang) for pin in data.python().router.pins)
    assert newest_pin <= parse_version(versions.router_pins_read)
    why = unread_release("0.5.24", routed=True)
    assert why is not None and "flags were read" in why.why


def test_render_from_flags_warns_about_an_unread_release(capsys):
    """A preview is not refused as a deploy is, but it says which spellings it used."""
    from pyinfra_sglang.cli.main import main

    argv = ["render", "--profile", "dense-bf16", "--gpus", "1", "--arch", "sm_90"]
    assert main([*argv, "--sglang-version", "0.5.99"]) == 0
    err = capsys.readouterr().err
    assert "render: warning: SGLang 0.5.99 is newer than the newest release" in err
    assert "it renders with the spellings of 0.5.23" in err
    assert main([*argv, "--sglang-version", "0.5.23"]) == 0
    assert "warning" not in capsys.readouterr().err
