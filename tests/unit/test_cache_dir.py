"""Where the model's Hub cache may be: refused by its text in the inventory, and by what the
host has there (the fact's real shell command, run here on scratch folders)."""

from __future__ import annotations

import getpass
import os
import subprocess
from pathlib import Path

import pytest

from checks.facts import CacheDirState
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.model_files.cache_dir import host_problem, parse_state, path_problem

ME = getpass.getuser()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/etc/sglang",
        "/etc/../home/x",
        "/usr",
        "/usr/share",
        "/usr/lib/hub",
        "/var",
        "/var/lib",
        "/var/lib/dpkg/hub",
        "/var/lib/sglang",
        "/boot",
        "/opt",
        "/srv",
        "/data",
        "/srv//hub",
        "/srv/hub/",
        "/srv/./hub",
    ],
)
def test_system_trees_shared_parents_and_unclean_paths_are_refused(path):
    assert path_problem(path)
    with pytest.raises(ValueError, match="sglang_model_cache_dir"):
        HostConfig(sglang_model_cache_dir=path)


@pytest.mark.parametrize(
    "path", ["/var/lib/sglang/huggingface/hub", "/srv/models/hub", "/data/hub", "/opt/hub"]
)
def test_the_default_and_folders_of_their_own_pass(path):
    assert path_problem(path) is None
    assert HostConfig(sglang_model_cache_dir=path).sglang_model_cache_dir == path


def state(path: Path) -> str | None:
    """The fact's command, run here for the current user; its judgement."""
    command = CacheDirState().command(str(path), ME)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return host_problem(CacheDirState().process(done.stdout.splitlines()), ME)


def test_a_folder_to_be_made_an_empty_one_and_the_users_own_pass(tmp_path):
    assert state(tmp_path / "new" / "hub") is None
    (tmp_path / "empty").mkdir()
    assert state(tmp_path / "empty") is None
    (tmp_path / "own" / "models--x").mkdir(parents=True)
    (tmp_path / "own" / "models--x" / "blob").write_text("x")
    assert state(tmp_path / "own") is None


def test_a_symlinked_component_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    problem = state(tmp_path / "link" / "hub")
    assert problem and "a symlink in the path" in problem and str(tmp_path / "real") in problem
    (tmp_path / "to-etc").symlink_to("/etc")
    assert "resolves to /etc" in state(tmp_path / "to-etc")


def test_a_packages_folder_is_refused():
    if subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode:
        pytest.skip("no dpkg-query here")
    assert "belongs to the package" in state(Path("/usr/share"))


def test_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a regular file" in state(tmp_path / "file")


def test_another_owners_tree_is_refused_naming_the_chown_not_done():
    parsed = parse_state(
        [
            "path=/srv/hub",
            "deepest=/srv/hub",
            "resolved=/srv/hub",
            "owner=root",
            "kind=directory",
            "foreign=/srv/hub/models--x/blobs/abc",
            "package=",
        ]
    )
    problem = host_problem(parsed, "sglang")
    assert problem == (
        "/srv/hub exists and holds files the service user sglang does not own "
        "(/srv/hub/models--x/blobs/abc); the deploy does not re-own a tree. If it is the "
        "model cache, give it to sglang first (chown -R sglang:sglang /srv/hub), or name "
        "another folder"
    )
    # The user's own folder with root's files left in it (an earlier release's download).
    own = parse_state(
        ["path=/h", "deepest=/h", "resolved=/h", "owner=sglang", "kind=directory", "foreign=/h/x"]
    )
    assert "(/h/x)" in host_problem(own, "sglang")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a root-owned tree")
def test_a_root_owned_tree_is_foreign_to_another_user(tmp_path):
    (tmp_path / "hub" / "models--x").mkdir(parents=True)
    command = CacheDirState().command(str(tmp_path / "hub"), "nobody")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    problem = host_problem(CacheDirState().process(done.stdout.splitlines()), "nobody")
    assert problem and "chown -R nobody:nobody" in problem


def test_a_folder_judged_on_its_own_is_left_out_of_its_parents_check(tmp_path):
    """HF_HOME holds the default cache, which may be a mount point of another owner."""
    (tmp_path / "home" / "hub").mkdir(parents=True)
    (tmp_path / "home" / "hub" / "x").write_text("x")
    command = CacheDirState().command(
        str(tmp_path / "home"), "nobody", prune=str(tmp_path / "home" / "hub")
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    found = CacheDirState().process(done.stdout.splitlines())
    assert found.foreign == str(tmp_path / "home")  # the folder itself, not the pruned one
    (tmp_path / "solo" / "hub").mkdir(parents=True)
    command = CacheDirState().command(
        str(tmp_path / "solo"), ME, prune=str(tmp_path / "solo" / "hub")
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert CacheDirState().process(done.stdout.splitlines()).foreign is None


def test_both_folders_are_read_in_one_round_trip_the_inner_one_judged_alone(tmp_path):
    """The cache and HF_HOME (which holds the default cache) in one command."""
    from checks.facts import CacheDirStates

    home, cache = tmp_path / "home", tmp_path / "home" / "hub"
    cache.mkdir(parents=True)
    (cache / "x").write_text("x")
    command = CacheDirStates().command((str(home), str(cache)), "nobody")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    outer, inner = CacheDirStates().process(done.stdout.splitlines())
    assert (outer.path, inner.path) == (str(home), str(cache))
    assert outer.foreign == str(home)  # the folder itself, the cache left out
    assert inner.foreign == str(cache)
