"""Issue 35 N9/N10: text from elsewhere that reached the terminal or the output raw, and
bounds on what the controller parses from a host."""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.report import format_table
from pyinfra_sglang.host_programs.decode_client import _masker
from pyinfra_sglang.inventory import validate_host_data
from pyinfra_sglang.python_env.flash_attn_build_plan import BuildProgress, ninja_steps
from pyinfra_sglang.terminal import shown

ESC = "\x1b"


def test_a_huge_step_count_is_no_ninja_step_and_the_monitor_goes_on():
    log = "[3/10] nvcc a.cu\n[" + "9" * 5000 + "/" + "9" * 5000 + "] forged\n"
    assert ninja_steps(log) == (3, 10)
    assert "compile steps 3/10" in BuildProgress().line(60, log)


def test_control_characters_are_shown_escaped_newlines_kept():
    text = f"error: {ESC}[2J{ESC}]0;owned\x07 line\r\nnext\tcol"
    assert shown(text) == "error: \\x1b[2J\\x1b]0;owned\\x07 line\\r\nnext\tcol"


def test_the_audit_and_analyze_table_escapes_what_a_host_reported():
    finding = Finding("ok", "gpu-count", f"GPU 0 is {ESC}[31mNVIDIA H200{ESC}[0m", gpu=0)
    table = format_table("gpu-1", [finding], what="analysis")
    assert ESC not in table and "\\x1b[31mNVIDIA H200" in table


def test_a_key_the_server_echoes_escaped_is_masked():
    mask = _masker(["sk-K3y"])
    lower = "".join(f"\\u{ord(c):04x}" for c in "sk-K3y")
    assert mask(f'{{"error": "{lower}"}}'.encode()) == b'{"error": "********"}'
    assert b"K3y" not in mask(lower.upper().replace("\\U", "\\u").encode())


def test_validate_never_echoes_sglang_env_values():
    _, [problem] = validate_host_data(
        "gpu-1", {"sglang_env": {"MY_SERVICE_CRED": "s3cr3t-v4lue", "NCCL_P2P_LEVEL": "NOPE"}}
    )
    assert "s3cr3t-v4lue" not in str(problem)
    assert problem.value == "{'MY_SERVICE_CRED': '********', 'NCCL_P2P_LEVEL': '********'}"
