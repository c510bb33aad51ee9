"""ApplyResult, the suite's "nothing changed" check: it must fail on a run that crashed, on a
host that failed, and on a host the run never reached. The crashed and unreachable runs are
real pyinfra runs on @local (their operations run ``true``, which changes nothing); pyinfra
ends a run whose only reachable host fails with no results, so the failed host's results are
built in the format of pyinfra_cli/prints.py build_results_json."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts.apply import ApplyResult, apply, write_inventory

UNREACHABLE = "127.0.0.9"  # port 9 (discard) is closed on this machine: connect is refused


def deploy(tmp_path: Path, body: str) -> str:
    path = tmp_path / "deploy_under_test.py"
    path.write_text("from pyinfra.operations import server\n" + body)
    return str(path)


def problems_of(result: ApplyResult, **kwargs) -> str:
    with pytest.raises(AssertionError) as raised:
        result.assert_unchanged(**kwargs)
    return str(raised.value)


def test_a_run_that_changed_nothing_passes(tmp_path):
    inventory = write_inventory(tmp_path / "inventory.py", {"hosts": [("@local", {})]})
    result = apply(
        inventory,
        deploy(tmp_path, 'server.shell(name="Skip", commands=["true"], _if=lambda: False)\n'),
    )
    assert result.expected_hosts == ("@local",)
    result.assert_unchanged()
    assert result.changed("@local") == []


def test_a_crashed_run_is_no_unchanged_run(tmp_path):
    inventory = write_inventory(tmp_path / "inventory.py", {"hosts": [("@local", {})]})
    result = apply(inventory, deploy(tmp_path, 'raise RuntimeError("boom")\n'))
    assert result.returncode != 0 and result.report is None
    problems = problems_of(result)
    assert "exit code 1, expected 0" in problems and "the run did not complete" in problems
    with pytest.raises(AssertionError, match="the run did not complete"):
        result.changed()


def test_a_host_the_run_never_reached_is_named(tmp_path):
    hosts = [("@local", {}), (UNREACHABLE, {"ssh_port": 9, "ssh_connect_retries": 0})]
    inventory = write_inventory(tmp_path / "inventory.py", {"hosts": hosts})
    result = apply(
        inventory,
        deploy(tmp_path, 'server.shell(name="Say", commands=["true"], _if=lambda: False)\n'),
    )
    # pyinfra prints its results for the host it reached: an unreached one is only absent.
    assert result.report is not None and result.changed("@local") == []
    problems = problems_of(result)
    assert f"{UNREACHABLE}: not reached (in no operation's results, never connected)" in problems
    with pytest.raises(AssertionError, match="was not reached by the run"):
        result.changed(UNREACHABLE)
    # Even where the exit code was expected, the absent host still fails the check.
    assert result.unchanged_problems(returncode=1) == [
        f"{UNREACHABLE}: not reached (in no operation's results, never connected)"
    ]


def test_a_deploy_with_no_operation_for_a_host_still_reached_it(tmp_path):
    """A role that has nothing to do on a host (host-driver mode, monitoring off) yields no
    operation: pyinfra's results are empty, yet the host was connected to and unchanged."""
    inventory = write_inventory(tmp_path / "inventory.py", {"hosts": [("@local", {})]})
    result = apply(inventory, deploy(tmp_path, "pass\n"))
    assert result.report is not None and result.operations == []
    result.assert_unchanged()


def test_limit_narrows_the_hosts_expected(tmp_path):
    hosts = [("@local", {}), (UNREACHABLE, {"ssh_port": 9})]
    inventory = write_inventory(tmp_path / "inventory.py", {"hosts": hosts})
    result = apply(
        inventory,
        deploy(tmp_path, 'server.shell(name="Say", commands=["true"], _if=lambda: False)\n'),
        options=("--limit", "@local"),
    )
    assert result.expected_hosts == ("@local",)
    result.assert_unchanged()


def payload(success: list[str], error: list[str], no_change: list[str]) -> dict:
    operation = {"op_hash": "0", "name": "Op", "names": ["Op"], "args": [], "hosts": 2}
    return {
        "plan": [],
        "results": {
            "operations": [
                {**operation, "success": success, "error": error, "no_change": no_change}
            ],
            "totals": {},
            "failed_hosts": error,
        },
    }


def test_a_failed_host_is_named_even_with_the_others_unchanged():
    result = ApplyResult([], 1, "", "", payload([], ["gpu-2"], ["gpu-1"]), ("gpu-1", "gpu-2"))
    assert result.unchanged_problems(returncode=1) == ["Op: failed on gpu-2"]
    assert "Op: failed on gpu-2" in problems_of(result)


def test_a_changed_host_is_named():
    result = ApplyResult([], 0, "", "", payload(["gpu-2"], [], ["gpu-1"]), ("gpu-1", "gpu-2"))
    assert result.unchanged_problems() == ["Op: changed gpu-2"]


def test_hosts_must_be_known():
    result = ApplyResult([], 0, "", "", payload([], [], ["gpu-1"]), None)
    with pytest.raises(ValueError, match="name them"):
        result.assert_unchanged()
    result.assert_unchanged(["gpu-1"])
