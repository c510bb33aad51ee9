"""The multi-node all-reduce preflight's verdicts on real outputs of its program
(tests/fixtures/preflight/, torch 2.13.0+cpu), the group's decision to run it, and its
command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.network.preflight import preflight_verdict
from roles.multinode_preflight import (
    GroupPreflight,
    exit_code_of,
    members_state,
    preflight_command,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/preflight"


def fixture(name: str, **changes) -> str:
    result = json.loads((FIXTURES / name).read_text())
    return json.dumps({**result, **changes})


def test_a_measured_all_reduce_without_a_readable_line_rate_is_a_warning_not_an_ok():
    verdict = preflight_verdict(fixture("ok-rank0.json"), 0, 30)
    assert verdict.level == "warn"
    assert "bus bandwidth 0.59 GB/s over lo" in verdict.text
    assert "line rate was not readable: not judged" in verdict.text


def test_a_bus_bandwidth_above_the_floor_of_the_line_rate_is_ok():
    # 10 Gb/s: the floor is 5% of 1.25 GB/s, 0.0625 GB/s.
    verdict = preflight_verdict(fixture("ok-rank1.json", line_rate_mbps=10000), 0, 30)
    assert verdict.level == "ok", verdict
    assert verdict.text.startswith("rank 1 of 2: all-reduce of 64 MiB: bus bandwidth 0.60 GB/s")
    assert "line rate 10 Gb/s" in verdict.text


def test_a_bus_bandwidth_below_the_floor_fails_with_its_numbers():
    # 200 Gb/s: the floor is 1.25 GB/s, twice what the loopback run measured.
    verdict = preflight_verdict(fixture("ok-rank0.json", line_rate_mbps=200000), 0, 30)
    assert verdict.level == "fail"
    assert "0.59 GB/s" in verdict.text and "below 1.25 GB/s" in verdict.text
    assert "5% of its 200 Gb/s line rate" in verdict.text


def test_a_floor_follows_the_data_file():
    fraction = data.multinode_preflight().min_line_rate_fraction
    # Exactly at the floor is not below it.
    rate = 0.59 * 8 * 1000 / fraction
    assert preflight_verdict(fixture("ok-rank0.json", line_rate_mbps=rate), 0, 30).level == "ok"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("rendezvous-alone-rank0.json", ["rank 0 of 2", "1/2 clients joined", "after 11.004 s"]),
        ("rendezvous-none-rank1.json", ["rank 1 of 2", "127.0.0.1:29567", "timed out"]),
    ],
)
def test_a_member_alone_at_the_rendezvous_fails_saying_who_and_how_long(name, words):
    verdict = preflight_verdict(fixture(name), 2, 10)
    assert verdict.level == "fail"
    assert "the rendezvous at" in verdict.text
    for word in words:
        assert word in verdict.text, verdict.text


def test_a_wrong_sum_fails_whatever_the_bandwidth():
    verdict = preflight_verdict(fixture("ok-rank0.json", correct=False), 0, 30)
    assert verdict == verdict.__class__(
        "fail", "rank 0 of 2: the all-reduce over lo gave a wrong sum"
    )


def test_a_venv_without_torch_fails_saying_so():
    verdict = preflight_verdict((FIXTURES / "no-torch.json").read_text(), 3, 30)
    assert verdict.level == "fail"
    assert verdict.text.startswith("this member: ") and "torch is not importable" in verdict.text


def test_a_run_stopped_by_its_timeout_fails_naming_the_limit():
    verdict = preflight_verdict("", 124, 30)
    kill_after = data.multinode_preflight().kill_after_s
    assert verdict.level == "fail"
    assert f"did not finish within {30 + kill_after} s" in verdict.text


def test_output_that_is_not_the_programs_fails_quoting_its_last_line():
    verdict = preflight_verdict("Traceback...\nSegmentation fault", 139, 30)
    assert verdict.level == "fail"
    assert "printed no result (exit 139): Segmentation fault" in verdict.text


def test_the_group_starts_from_nothing_only_when_every_member_planned_it_with_no_server():
    run = GroupPreflight()
    members = ("a", "b", "c")
    run.servers["a"] = False
    assert members_state(run, members) == ("missing", ["b", "c"])
    run.servers.update(b=True, c=False)
    assert members_state(run, members) == ("running", ["b"])
    run.servers["b"] = False
    assert members_state(run, members) == ("start", [])


def test_the_command_runs_the_program_under_its_timeout_and_prints_its_exit_status():
    # The project's own Python has no torch: the program says so and exits 3.
    command = preflight_command(
        sys.executable, 1, 2, "10.0.0.1:50000", {"GLOO_SOCKET_IFNAME": "eth0"}, 20
    )
    limit = 20 + data.multinode_preflight().kill_after_s
    assert f"timeout -k 5 {limit} {sys.executable} " in command
    assert "export GLOO_SOCKET_IFNAME=eth0\n" in command
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    text, code = exit_code_of(done.stdout)
    assert code == 3
    assert json.loads(text) == {"error": "torch is not importable: No module named 'torch'"}


def test_a_bootstrap_value_reaches_the_program_as_one_literal_word(tmp_path):
    value = f"a'b $(touch {tmp_path}/ran)"
    command = preflight_command(sys.executable, 0, 2, "h:1", {"GLOO_SOCKET_IFNAME": value}, 20)
    exports = [line for line in command.splitlines() if line.lstrip("(").startswith("export ")]
    shell = "\n".join(line.lstrip("(") for line in exports) + '\nprintf %s "$GLOO_SOCKET_IFNAME"'
    done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True)
    assert done.stdout == value
    assert not (tmp_path / "ran").exists()
