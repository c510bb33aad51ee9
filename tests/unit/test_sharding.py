"""The shards scripts/test.sh runs side by side (tests/sharding.py): every module in exactly
one shard, balanced by measured time, the same deal in every shard, and address slices that
never overlap."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.sharding import address_slice, deal, module_weights, parse_shard


def test_every_module_lands_in_exactly_one_shard_longest_first():
    weights = {"a.py": 100.0, "b.py": 60.0, "c.py": 50.0, "d.py": 10.0, "e.py": 1.0}
    shards = deal(weights, 2)
    assert sorted(m for shard in shards for m in shard) == sorted(weights)
    # 100 | 60 + 50 = 110, then 10 to the first (110), the tie of 110 each to the first.
    assert shards == [["a.py", "d.py", "e.py"], ["b.py", "c.py"]]
    loads = [sum(weights[m] for m in shard) for shard in shards]
    assert max(loads) - min(loads) <= max(weights.values())


def test_the_deal_does_not_depend_on_the_order_modules_were_collected():
    weights = {f"tests/unit/test_{i}.py": float(i % 7) for i in range(40)}
    reversed_weights = dict(reversed(list(weights.items())))
    assert deal(weights, 3) == deal(reversed_weights, 3)


def test_an_unmeasured_module_counts_as_its_folders_median():
    measured = {
        "tests/integration/test_a.py": 100.0,
        "tests/integration/test_b.py": 300.0,
        "tests/unit/test_c.py": 2.0,
    }
    modules = ["tests/integration/test_new.py", "tests/unit/test_new.py", "tests/other/x.py"]
    weights = module_weights(modules, measured)
    assert weights["tests/integration/test_new.py"] == 200.0
    assert weights["tests/unit/test_new.py"] == 2.0
    assert weights["tests/other/x.py"] > 0  # no folder measured: a default, never zero


def test_address_slices_of_the_shards_never_overlap_and_stay_in_range():
    slices = [set(address_slice(11, 250, f"{k}/3")) for k in (1, 2, 3)]
    assert not (slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2])
    assert all(min(s) >= 11 and max(s) <= 250 and len(s) >= 60 for s in slices)
    assert address_slice(11, 250, None) == range(11, 251)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/2/3"])
def test_a_bad_shard_is_refused_saying_what_is_allowed(text):
    with pytest.raises(ValueError, match="K/N|K is from 1 to N"):
        parse_shard(text)


@pytest.mark.parametrize("text", ["1/17", "1/1000", "16/99999"])
def test_a_shard_count_beyond_the_bound_is_refused(text):
    with pytest.raises(ValueError, match="N is at most 16"):
        parse_shard(text)


@pytest.mark.parametrize("shards", ["17", "99", "0", "1e3", "9" * 5000, "-1"])
def test_the_test_script_refuses_a_shard_count_out_of_bounds(shards):
    script = Path(__file__).resolve().parents[2] / "scripts/test.sh"
    done = subprocess.run(
        ["bash", str(script), "--collect-only"],
        env={**os.environ, "PYINFRA_SGLANG_TEST_SHARDS": shards},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "a whole number from 1 to 16" in done.stderr
