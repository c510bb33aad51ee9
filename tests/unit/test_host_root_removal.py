"""A test host's root is removed without holding a descriptor per directory, in a test
process where gevent defers closes (tests/hosts/testhosts.py remove_tree). A CI shard ran
out of descriptors (EMFILE at 20,000) removing its host roots with shutil.rmtree."""

from __future__ import annotations

import os
import shutil

import gevent
import pyinfra_cli  # noqa: F401  its import monkey-patches os.close, as in the test process

from tests.hosts.testhosts import remove_tree


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def tree_of_directories(root, count: int) -> None:
    for n in range(count):
        (root / f"d{n // 50}" / f"e{n}").mkdir(parents=True)


def test_removing_a_tree_holds_no_descriptor_per_directory_while_gevent_defers_closes(tmp_path):
    gevent.get_hub()  # a hub exists, as after any pyinfra run in this process
    root = tmp_path / "root"
    tree_of_directories(root, 2000)
    before = open_descriptors()
    remove_tree(root)
    assert not root.exists()
    assert open_descriptors() <= before + 2


def test_the_cause_shutil_rmtree_leaves_a_descriptor_per_directory_until_the_loop_runs(tmp_path):
    # gevent >= 25.8.1's os.close defers closing anything but a regular file to its loop: in
    # plain code that never yields, shutil.rmtree's directory descriptors pile up.
    gevent.get_hub()
    root = tmp_path / "root"
    tree_of_directories(root, 2000)
    before = open_descriptors()
    shutil.rmtree(root)
    piled = open_descriptors() - before
    gevent.sleep(0.05)  # the loop runs: the deferred closes happen
    assert piled >= 2000, piled
    assert open_descriptors() <= before + 2
