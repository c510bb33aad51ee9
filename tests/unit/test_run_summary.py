"""The end-of-run summary's text (pyinfra_sglang/run_summary.py), the inventory remediations
name, and how the summary reads pyinfra's CLI arguments (checks/run_summary.py)."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pyinfra
import pytest
from pyinfra.api.state import StateStage

from checks import run_summary as checks_summary
from checks.failures import fail_run
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.report import findings_for_inventory, format_table, unreachable_report
from pyinfra_sglang.audit.service import findings_for_service
from pyinfra_sglang.redact import mask_text
from pyinfra_sglang.run_summary import (
    REASON_CHARS,
    HostOutcome,
    one_line,
    prefixed,
    summary_line,
    summary_lines,
    with_inventory,
)


@pytest.mark.parametrize(
    ("outcome", "line"),
    [
        (HostOutcome("gpu-1", "ok"), "[gpu-1] ok"),
        (HostOutcome("gpu-1", "changed", changed=3), "[gpu-1] changed 3"),
        (
            HostOutcome("gpu-2", "failed", reason="audit failed: driver-drift"),
            "[gpu-2] failed: audit failed: driver-drift",
        ),
        (
            HostOutcome("10.0.0.9", "unreachable", reason="Could not connect (timed out)"),
            "[10.0.0.9] unreachable: Could not connect (timed out)",
        ),
        (
            HostOutcome("gpu-1", "would-change", operations=("SGLang service | Serve x",)),
            "[gpu-1] would change: SGLang service | Serve x",
        ),
        (HostOutcome("gpu-1", "no-change"), "[gpu-1] no change"),
        (HostOutcome("gpu-1", "failed"), "[gpu-1] failed: no reason given"),
    ],
)
def test_one_line_a_host_says_what_happened(outcome, line):
    assert summary_line(outcome) == line


def test_lines_come_in_host_order_whatever_order_hosts_finished_in():
    lines = summary_lines([HostOutcome("gpu-2", "ok"), HostOutcome("gpu-1", "changed", 1)])
    assert lines == ["[gpu-1] changed 1", "[gpu-2] ok"]


def test_a_reason_is_one_line_without_colours_or_secrets():
    text = (
        "\x1b[31mthe new configuration did not come up\x1b[0m:\n"
        "  --api-key sk-live-123 HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 key-9"
    )
    line = one_line(text, ["key-9"])
    assert "\n" not in line and "\x1b" not in line
    assert "sk-live-123" not in line and "hf_abcdefghij" not in line and "key-9" not in line
    assert line.startswith("the new configuration did not come up: --api-key ")
    assert line.count(mask_text()) == 3


def test_a_long_reason_is_cut():
    line = one_line("x" * (REASON_CHARS * 2))
    assert len(line) == REASON_CHARS and line.endswith("...")


def test_a_table_says_whose_it_is_on_every_line():
    table = format_table("gpu-1", [Finding("fail", "driver-drift", "branch 580, wanted 590")])
    lines = prefixed("gpu-1", table).splitlines()
    # pyinfra puts the host before the first line itself.
    assert lines[0].startswith("audit of gpu-1: FAIL")
    assert all(line.startswith("    [gpu-1] ") for line in lines[1:]) and len(lines) == 3


def test_remediations_name_the_inventory_the_run_was_started_with():
    [down] = findings_for_service("sglang.service", {})
    [filled] = findings_for_inventory([down], "inventories/my gpus.py")
    assert "`pyinfra 'inventories/my gpus.py' deploy/site.py`" in filled.message
    assert "INVENTORY" not in filled.message
    [local] = findings_for_inventory([down], "@local")
    assert "`pyinfra @local deploy/site.py`" in local.message
    # Offline (`analyze`) no inventory is known: the generic form stays.
    assert findings_for_inventory([down], None) == [down]
    assert with_inventory("run `pyinfra INVENTORY deploy/site.py`", "") == (
        "run `pyinfra INVENTORY deploy/site.py`"
    )


def test_an_inventory_path_cannot_break_out_of_the_command():
    text = with_inventory("`pyinfra INVENTORY deploy/site.py`", "x; rm -rf ~")
    assert text == "`pyinfra 'x; rm -rf ~' deploy/site.py`"


def test_an_unreachable_host_has_a_report_that_says_so():
    document = unreachable_report("gpu-9", "Could not connect (Connection refused)")
    assert document["status"] == document["result"] == "unreachable"
    assert document["error"] == "Could not connect (Connection refused)"
    assert document["host"] == "gpu-9" and document["findings"] == []


def test_the_inventory_and_dry_come_from_pyinfras_own_argument_parsing(monkeypatch):
    monkeypatch.setattr(pyinfra, "is_cli", True)
    argv = ["pyinfra", "-y", "--dry", "--data", "a=b", "inventories/my gpus.py", "deploy/site.py"]
    monkeypatch.setattr(sys, "argv", argv)
    checks_summary._parse.cache_clear()
    assert checks_summary.run_inventory() == "inventories/my gpus.py"
    assert checks_summary.dry_run() is True
    monkeypatch.setattr(sys, "argv", ["pyinfra", "@local", "deploy/audit.py"])
    assert checks_summary.run_inventory() == "@local" and checks_summary.dry_run() is False
    # Outside pyinfra's CLI (the API, tests) nothing is known: remediations stay generic.
    monkeypatch.setattr(pyinfra, "is_cli", False)
    assert checks_summary.run_inventory() is None and checks_summary.dry_run() is False


def test_the_first_error_logged_for_a_host_is_kept_without_pyinfras_generic_line():
    state = SimpleNamespace(current_stage=StateStage.Execute)
    errors = checks_summary._FirstErrors(state)

    def log(level: int, message: str) -> None:
        errors.emit(logging.LogRecord("pyinfra", level, __file__, 1, message, None, None))

    log(logging.ERROR, "\x1b[1m[gpu-1]\x1b[0m   \x1b[31mError: executed 0 commands\x1b[0m")
    log(logging.WARNING, "[gpu-1] REBOOT REQUIRED for the NVIDIA driver")
    log(logging.WARNING, "[gpu-1] Unexpected error in Python callback: OperationError('x',)")
    log(logging.ERROR, "[gpu-1] later error")
    log(logging.ERROR, "[gpu-2] nested model: the download failed: 503")
    assert errors.first == {
        "gpu-1": "Unexpected error in Python callback: OperationError('x',)",
        "gpu-2": "model: the download failed: 503",
    }


def test_a_failing_check_fails_the_run_without_failing_pyinfras_operation(caplog):
    class Host:  # pyinfra keeps hosts in sets: hashable, as its Host is
        name, print_prefix = "@local", "[@local] "

    host = Host()
    state = SimpleNamespace(failed_hosts=set(), active_hosts={"@local"}, callback_handlers=[])
    host.state = state
    with caplog.at_level(logging.ERROR, logger="pyinfra"):
        fail_run(state, host, "audit", ["no-nvidia-gpu"])
    # pyinfra's CLI exits 1 when failed_hosts holds a host; the host stays active, so a run
    # whose every host fails its audit does not end in "No hosts remaining!".
    assert state.failed_hosts == {host} and state.active_hosts == {"@local"}
    assert "[@local] audit failed: no-nvidia-gpu" in caplog.text


def test_the_summary_prints_once_after_the_last_host_disconnects_not_at_a_reboot(caplog):
    from pyinfra.api import Config, Inventory, State

    inventory = Inventory((["gpu-1", "gpu-2"], {}))
    state = State(inventory, Config())
    one, two = inventory.get_host("gpu-1"), inventory.get_host("gpu-2")
    state.activate_host(one)
    state.activate_host(two)
    summary = checks_summary.run_summary(state)
    assert checks_summary.run_summary(state) is summary  # one handler a run
    state.current_stage = StateStage.Execute
    checks_summary.note_failure(two, "bench failed: no server at http://127.0.0.1:30000")
    state.failed_hosts.add(two)
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        # A reboot inside an operation disconnects the host too: that is no end of the run.
        one.executing_op_hash = "reboot"
        state.trigger_callbacks("host_disconnect", one)
        one.executing_op_hash = None
        state.trigger_callbacks("host_disconnect", two)
        assert "Summary" not in caplog.text
        state.trigger_callbacks("host_disconnect", one)
    lines = [r.getMessage() for r in caplog.records]
    start = lines.index("--> Summary, one line a host:")
    assert lines[start + 1 :] == [
        "[gpu-1] ok",
        "[gpu-2] failed: bench failed: no server at http://127.0.0.1:30000",
    ]


def test_a_conditional_operation_is_planned_only_behind_its_trigger():
    from pyinfra.api.operation import OperationMeta

    repo, other = OperationMeta("repo", True), OperationMeta("other", True)
    assert checks_summary._triggered(repo.did_change, {"repo": "Add the repository"})
    assert not checks_summary._triggered(other.did_change, {"repo": "Add the repository"})
    # A condition that names no operation (any of several) cannot be told: left out.
    assert not checks_summary._triggered(lambda: True, {"repo": "Add the repository"})
