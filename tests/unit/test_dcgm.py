"""DCGM in the audit: ``dcgmi diag``'s table parsed from public outputs
(tests/fixtures/gpu/public/dcgmi_diag_*, its README names each source) and judged as
``dcgm-diag``; the DcgmDiag fact's command and reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from checks.facts import DcgmDiag
from pyinfra_sglang import data
from pyinfra_sglang.audit.health import findings_for_dcgm
from pyinfra_sglang.inventory.validation import validate_host_data
from pyinfra_sglang.parsers.dcgm import parse_dcgm_diag
from roles.common import apt_install, apt_update
from roles.dcgm import dcgm_installed, dcgm_plan, dcgm_running
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

PUBLIC = Path(__file__).parents[1] / "fixtures" / "gpu" / "public"
DEPLOYMENT_PASS = "dcgmi_diag_r3_deployment_pass_dcgm55_trimmed.txt"
MEMORY_FAIL = "dcgmi_diag_r2_gpu_memory_fail_godcgm52_trimmed.txt"
DCGM4_PASS = "dcgmi_diag_dcgm4_software_pass_dcgm253_trimmed.txt"


def public(name: str) -> list[str]:
    lines = (PUBLIC / name).read_text().splitlines()
    assert lines[0].startswith("# source: https://github.com/NVIDIA/")
    return lines[1:]


def diag(name: str, level: int = 1, rc: int = 0) -> dict:
    return {"present": True, "level": level, "rc": rc, **parse_dcgm_diag(public(name)), "head": []}


def test_dcgm3_deployment_rows_read_with_their_names_and_results():
    parsed = parse_dcgm_diag(public(DEPLOYMENT_PASS))
    assert [test["name"] for test in parsed["tests"]] == [
        "Denylist",
        "NVML Library",
        "CUDA Main Library",
        "Permissions and OS Blocks",
        "Persistence Mode",
        "Environment Variables",
        "Page Retirement/Row Remap",
        "Graphics Processes",
        "Inforom",
    ]
    assert {test["category"] for test in parsed["tests"]} == {"Deployment"}
    assert {test["result"] for test in parsed["tests"]} == {"Pass"}


def test_a_failed_gpu_memory_test_reads_per_gpu_with_its_unwrapped_warning():
    [test] = parse_dcgm_diag(public(MEMORY_FAIL))["tests"]  # the leading Info rows: no test yet
    assert (test["category"], test["name"], test["result"]) == ("Hardware", "GPU Memory", "Fail")
    assert test["gpus"] == {"1": "Pass", "0": "Fail"}
    # dcgmi wraps inside words ("R" / "estart"): joined back as printed.
    assert test["details"] == [
        "GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset "
        "GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable "
        "device(s) is/are busy or unavailable'."
    ]


def test_dcgm4_layout_reads_metadata_and_one_result_per_gpu():
    parsed = parse_dcgm_diag(public(DCGM4_PASS))
    assert parsed["metadata"]["DCGM Version"] == "4.2.3"
    assert parsed["metadata"]["Driver Version Detected"] == "570.148.08"
    [test] = parsed["tests"]
    assert (test["name"], test["result"]) == ("software", "Pass")
    assert test["gpus"] == {str(n): "Pass" for n in range(4)}


def test_a_fail_fails_on_its_gpu_and_says_what_to_do():
    [finding] = findings_for_dcgm(diag(MEMORY_FAIL, level=2))
    assert (finding.level, finding.code, finding.gpu) == ("fail", "dcgm-diag", 0)
    assert 'Hardware test "GPU Memory" Fail on GPU 0' in finding.message
    assert "cuCtxCreate" in finding.message and "dcgmi diag -r 2" in finding.message
    assert "nvidia-smi -r" in finding.message or "reset" in finding.message.lower()


def test_a_warn_warns_and_a_skip_is_not_judged():
    warned = diag(DCGM4_PASS)
    warned["tests"] = [
        {**warned["tests"][0], "result": "Warn", "gpus": {"0": "Warn", "1": "Pass"}},
        {"category": "Hardware", "name": "memory", "result": "Skip", "gpus": {}, "details": []},
    ]
    [finding] = findings_for_dcgm(warned)
    assert (finding.level, finding.gpu) == ("warn", 0)
    assert 'Deployment test "software" Warn on GPU 0' in finding.message


def test_every_pass_is_one_ok_naming_the_count_and_version():
    [finding] = findings_for_dcgm(diag(DCGM4_PASS))
    assert (finding.level, finding.code) == ("ok", "dcgm-diag")
    assert finding.message == "dcgmi diag -r 1: exit 0, 1 test(s) passed (DCGM 4.2.3)."
    [nine] = findings_for_dcgm(diag(DEPLOYMENT_PASS, level=3))
    assert nine.message == "dcgmi diag -r 3: exit 0, 9 test(s) passed."


def test_absent_dcgmi_is_a_not_run_note_never_a_failure_and_unread_gives_nothing():
    [finding] = findings_for_dcgm({"present": False, "level": 1})
    assert finding.level == "ok" and "not run: dcgmi is not on PATH" in finding.message
    assert findings_for_dcgm(None) == []


def test_dcgmi_that_prints_no_table_warns_with_what_it_printed():
    printed = {"present": True, "level": 1, "rc": 255, "tests": [], "metadata": {}}
    printed["head"] = ["Error: unable to establish a connection to the specified host: localhost"]
    [finding] = findings_for_dcgm(printed)
    assert finding.level == "warn" and "exit 255" in finding.message
    assert "unable to establish a connection" in finding.message


@pytest.mark.parametrize("level", [1, 2, 3])
def test_the_fact_runs_the_level_only_where_dcgmi_is_and_reads_its_exit(level):
    fact = DcgmDiag()
    command = fact.command(level)
    assert command.startswith("command -v dcgmi ")
    assert f"dcgmi diag -r {level} 2>&1" in command
    assert fact.process(["### no dcgmi"]) == {"present": False}
    read = fact.process([*public(MEMORY_FAIL), "### rc=226"])
    assert read["present"] and read["rc"] == 226
    assert read["tests"][0]["result"] == "Fail"


# --- nvidia_dcgm_install (roles/dcgm.py) --------------------------------------------------


def test_every_cuda_major_the_inventory_allows_has_a_dcgm_package():
    majors = {version.split(".", 1)[0] for version in data.nvidia().cuda_versions}
    assert majors <= set(data.dcgm().install.packages)
    assert data.dcgm().install.packages["12"] == "datacenter-gpu-manager-4-cuda12"
    assert data.dcgm().install.packages["13"] == "datacenter-gpu-manager-4-cuda13"


def test_dcgm_plan_off_host_and_per_cuda_major():
    assert dcgm_plan(False, False, "13.0") == (None, "no DCGM (nvidia_dcgm_install is off)")
    package, reason = dcgm_plan(True, True, "13.0")
    assert package is None and 'nvidia_driver_source = "host" installs nothing' in reason
    assert dcgm_plan(True, False, "12.9")[0] == "datacenter-gpu-manager-4-cuda12"
    assert dcgm_plan(True, False, "13.1")[0] == "datacenter-gpu-manager-4-cuda13"
    with pytest.raises(ValueError, match=r"no DCGM package for CUDA 11.8 .*majors 12, 13"):
        dcgm_plan(True, False, "11.8")


def test_dcgm_switch_is_off_by_default_and_a_strict_bool():
    config, problems = validate_host_data("gpu1", {})
    assert problems == [] and config.nvidia_dcgm_install is False
    assert config.audit_dcgm_level == 1
    _, problems = validate_host_data("gpu1", {"nvidia_dcgm_install": "yes"})
    [problem] = problems
    assert problem.field == "nvidia_dcgm_install" and "true, false" in problem.allowed


PACKAGE = "datacenter-gpu-manager-4-cuda13"
UNIT = "nvidia-dcgm"


@pytest.mark.parametrize(
    OP_CASE_FIELDS,
    [
        op_case(
            dcgm_installed,
            "missing",
            {DebPackages: {"nvidia-open": ["595.45.04-1"]}},
            {"package": PACKAGE},
            commands=[
                str(apt_update()),
                str(apt_install([PACKAGE], "--install-recommends")),
            ],
        ),
        op_case(
            dcgm_installed,
            "installed",
            {DebPackages: {PACKAGE: ["1:4.5.2-1"]}},
            {"package": PACKAGE},
            noops=[f"{PACKAGE} installed"],
        ),
        op_case(
            dcgm_running,
            "stopped",
            {SystemdStatus: {f"{UNIT}.service": False}, SystemdEnabled: {}},
            {"unit": UNIT},
            commands=[f"systemctl start {UNIT}.service", f"systemctl enable {UNIT}.service"],
        ),
        op_case(
            dcgm_running,
            "running",
            {
                SystemdStatus: {f"{UNIT}.service": True},
                SystemdEnabled: {f"{UNIT}.service": True},
            },
            {"unit": UNIT},
            noops=[f"service {UNIT}.service is running"],
        ),
    ],
)
def test_dcgm_operations(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


def _diag(rows: list[str], rc: int) -> dict:
    table = ["+-----  Hardware  ----------+------------------------------------------------+"]
    table += [f"| {name:<25} | {value:<46} |" for name, value in rows]
    return {"present": True, "level": 1, "rc": rc, **parse_dcgm_diag(table), "head": []}


def test_a_run_cut_off_by_its_timeout_is_never_a_pass():
    """Issue 47: rc 124 after five Pass rows was "5 test(s) passed"."""
    rows = [(f"Test {n}", "Pass") for n in range(5)]
    [cut] = findings_for_dcgm(_diag(rows, 124))
    assert cut.level == "warn" and "exited 124 (cut off by the audit's timeout)" in cut.message
    assert "5 test result(s), 5 of them passes" in cut.message
    [ok] = findings_for_dcgm(_diag(rows, 0))
    assert ok.level == "ok" and "exit 0, 5 test(s) passed" in ok.message


@pytest.mark.parametrize(
    ("word", "level"),
    [("Failed", "fail"), ("FAIL", "fail"), ("Error", "fail"), ("fail", "fail"),
     ("Warning", "warn"), ("Broken", "warn"), ("Passed", "ok"), ("PASS", "ok")],
)  # fmt: skip
def test_result_words_in_any_case_and_unknown_ones_are_judged(word, level):
    """A Failed, Error or FAIL row beside a Pass once counted as skipped."""
    findings = findings_for_dcgm(_diag([("Memory", "Pass"), ("Stress", word)], 0))
    assert {f.level for f in findings} == {level}
    if word == "Broken":
        assert "unrecognized result 'Broken'" in findings[0].message
