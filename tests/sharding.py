"""The suite split into shards that run side by side (scripts/test.sh): ``pytest --shard K/N``
keeps the test modules of shard K and deselects the rest.

Why: most of the suite's time is the host tests, which wait on SSH, apt and systemd inside
the test hosts far more than they use a CPU; two shards keep both cores of a small CI
machine busy (bench/suite_times.py shows the time per module and per shard).

A whole module goes to one shard: its module-scoped hosts and fixtures are built once. The
modules are dealt out longest first, each to the shard with the least time so far
(tests/module_seconds.json, from a measured run; a module not in it counts as its folder's
median). Every shard collects the same modules, so each computes the same deal on its own.

Shards share one machine: each gets its own slice of the 127.0.0.x addresses and of the
private networks' 10.213.N subnets (tests/hosts/testhosts.py reads ``SHARD_ENV``), so two
shards never boot hosts on the same address.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

WEIGHTS = Path(__file__).with_name("module_seconds.json")
SHARD_ENV = "PYINFRA_SGLANG_TEST_SHARD"
# A module in no measured run, in a folder with none either: an average host-test module.
UNKNOWN_MODULE_S = 60.0


# The most shards side by side: every shard needs addresses of its own for the hosts a module
# boots at once (up to 8), and each shard is a process of its own on a 2-16 core machine.
MAX_SHARDS = 16


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N; ValueError naming what is allowed."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: write K/N, e.g. 1/2") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: K is from 1 to N")
    if count > MAX_SHARDS:
        raise ValueError(
            f"--shard {text!r}: N is at most {MAX_SHARDS} (each shard boots its hosts on its "
            "own slice of 240 loopback addresses and runs on this machine's CPUs)"
        )
    return index, count


def module_weights(modules: list[str], measured: dict[str, float]) -> dict[str, float]:
    """Seconds per module: measured, else its folder's median, else UNKNOWN_MODULE_S."""
    by_folder: dict[str, list[float]] = defaultdict(list)
    for module, seconds in measured.items():
        by_folder[module.rsplit("/", 1)[0]].append(seconds)
    weights = {}
    for module in modules:
        folder = by_folder.get(module.rsplit("/", 1)[0])
        fallback = statistics.median(folder) if folder else UNKNOWN_MODULE_S
        weights[module] = measured.get(module, fallback)
    return weights


def deal(weights: dict[str, float], count: int) -> list[list[str]]:
    """The modules in ``count`` shards: longest first, each to the least-loaded shard (ties:
    the lower shard), modules of equal time by name. Deterministic."""
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for module in sorted(weights, key=lambda m: (-weights[m], m)):
        target = min(range(count), key=lambda k: (loads[k], k))
        shards[target].append(module)
        loads[target] += weights[module]
    return shards


def read_measured(path: Path = WEIGHTS) -> dict[str, float]:
    return json.loads(path.read_text()) if path.is_file() else {}


def address_slice(first: int, last: int, shard: str | None) -> range:
    """The part of ``first..last`` (inclusive) that shard ``K/N`` may use; all of it
    outside a sharded run."""
    if not shard:
        return range(first, last + 1)
    index, count = parse_shard(shard)
    span = (last - first + 1) // count
    start = first + (index - 1) * span
    return range(start, start + span)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        metavar="K/N",
        help="run only shard K of N (whole modules, balanced by tests/module_seconds.json)",
    )


def pytest_configure(config: pytest.Config) -> None:
    shard = config.getoption("--shard")
    if shard:
        try:
            parse_shard(shard)
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
        os.environ[SHARD_ENV] = shard


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if not shard:
        return
    index, count = parse_shard(shard)
    root = Path(str(config.rootpath))
    module_of = {item: Path(str(item.path)).relative_to(root).as_posix() for item in items}
    weights = module_weights(sorted(set(module_of.values())), read_measured())
    mine = set(deal(weights, count)[index - 1])
    keep = [item for item in items if module_of[item] in mine]
    dropped = [item for item in items if module_of[item] not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
