"""The flash-attn build plan over a table of host sizes, and the build-plan command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.python_env.flash_attn_build_plan import (
    BuildPlanError,
    BuildProgress,
    archs_from_compute_caps,
    duration_text,
    flash_attn_default_jobs,
    ninja_steps,
    plan_flash_attn_build,
)

SIZES = [(2, 8), (16, 64), (32, 256), (128, 256), (128, 512), (128, 1024)]


@pytest.mark.parametrize(("cores", "mem_gb"), SIZES, ids=[f"{c}c-{m}GB" for c, m in SIZES])
def test_plan_stays_under_the_bound_and_uses_it_where_cores_allow(cores, mem_gb):
    plan = plan_flash_attn_build(cores, mem_gb, ["90"])
    assert plan.estimated_peak_gb <= plan.bound_gb
    assert plan.max_jobs >= 1 and 1 <= plan.nvcc_threads <= 4
    assert plan.max_jobs * plan.nvcc_threads <= cores
    cores_allow_more = plan.max_jobs * plan.nvcc_threads + plan.nvcc_threads <= cores
    if cores_allow_more:
        assert plan.estimated_peak_gb >= 0.7 * plan.bound_gb, plan.describe()


def test_reference_host_gets_about_the_jobs_that_passed():
    # The reference host (128 cores) ran out of memory with 128 jobs and passed with 20.
    plan = plan_flash_attn_build(128, 512, ["120"])
    assert (plan.max_jobs, plan.nvcc_threads) == (19, 4)
    assert plan.env() == {
        "MAX_JOBS": "19",
        "NVCC_THREADS": "4",
        "FLASH_ATTN_CUDA_ARCHS": "120",
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
    }


def test_flash_attn_default_has_no_margin_where_ours_has():
    # flash-attn's own guess on 128 cores / 256 GB: 28 jobs x 4 threads x 5 GB = 560 GB.
    assert flash_attn_default_jobs(128, 256) * 4 * 5 > 256
    assert plan_flash_attn_build(128, 256, ["90"]).estimated_peak_gb <= 256 * 0.75


def test_impossible_plan_is_refused_with_the_numbers():
    with pytest.raises(BuildPlanError, match=r"needs ~5 GB.*bound is 3.0 GB \(75% of 4.0 GB"):
        plan_flash_attn_build(8, 4, ["90"])


def test_no_archs_is_refused():
    with pytest.raises(BuildPlanError, match="no CUDA architectures"):
        plan_flash_attn_build(8, 64, [])


def test_archs_from_compute_caps():
    assert archs_from_compute_caps(["9.0", "9.0"]) == ("90",)
    assert archs_from_compute_caps(["12.0", "9.0", "10.0"]) == ("90", "100", "120")


def test_build_plan_command(capsys):
    assert main(["build-plan", "--cores", "32", "--mem-gb", "256", "--archs", "90,120"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0] == "MAX_JOBS=8 NVCC_THREADS=4 FLASH_ATTN_CUDA_ARCHS='90;120' "
        "FLASH_ATTENTION_FORCE_BUILD=TRUE"
    )
    # The line is safe to paste into a shell: the ";" stays inside the value.
    shell = subprocess.run(
        ["bash", "-c", f"env -i {out[0]} sh -c 'echo $FLASH_ATTN_CUDA_ARCHS'"],
        capture_output=True,
        text=True,
    )
    assert shell.stdout == "90;120\n"
    # render's spelling works here too.
    assert main(["build-plan", "--cores", "32", "--mem-gb", "256", "--archs", "sm_90,sm_120"]) == 0
    assert "FLASH_ATTN_CUDA_ARCHS='90;120'" in capsys.readouterr().out
    assert out[1].startswith("estimated peak 160 GB of a 192 GB bound")
    assert main(["build-plan", "--cores", "2", "--mem-gb", "4"]) == 1
    assert "refused: not even one flash-attn compile job fits" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cores", "mem_gb", "fraction", "message"),
    [
        (0, 64, None, "at least 1 CPU core, not 0"),
        (-8, 64, None, "at least 1 CPU core, not -8"),
        (8, float("nan"), None, "available memory must be a number of GB, not nan"),
        (8, float("inf"), None, "available memory must be a number of GB, not inf"),
        (8, 64, 5, "above 0 and at most 1, not 5"),
        (8, 64, 0, "above 0 and at most 1, not 0"),
        (8, 64, float("nan"), "above 0 and at most 1, not nan"),
    ],
)
def test_numbers_that_make_no_plan_are_refused(cores, mem_gb, fraction, message):
    with pytest.raises(BuildPlanError, match=re.escape(message)):
        plan_flash_attn_build(cores, mem_gb, ["90"], fraction)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cores", "0", "--mem-gb", "64"], "argument --cores: not a positive whole number"),
        (["--cores", "-2", "--mem-gb", "64"], "argument --cores: not a positive whole number"),
        (["--cores", "8", "--mem-gb", "nan"], "argument --mem-gb: not a finite number: 'nan'"),
        (["--cores", "8", "--mem-gb", "0"], "argument --mem-gb: not a number of GB above 0"),
        (
            ["--cores", "8", "--mem-gb", "64", "--memory-fraction", "5"],
            "argument --memory-fraction: not a fraction above 0 and at most 1: '5'",
        ),
        (
            ["--cores", "8", "--mem-gb", "64", "--archs", "hopper"],
            "argument --archs: not CUDA architectures",
        ),
    ],
)
def test_build_plan_command_refuses_bad_numbers_with_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["build-plan", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_build_plan_command_takes_archs_with_semicolons_and_a_fraction_of_1(capsys):
    args = ["--cores", "32", "--mem-gb", "256", "--archs", "90;120a", "--memory-fraction", "1"]
    assert main(["build-plan", *args]) == 0
    assert "FLASH_ATTN_CUDA_ARCHS='90;120a'" in capsys.readouterr().out


# -- what a build covers ------------------------------------------------------------------------


def test_built_archs_read_from_the_record_or_its_env():
    from pyinfra_sglang.python_env.flash_attn_build_plan import built_archs

    assert built_archs({"archs": ["120", "90"]}) == ("90", "120")
    # Records written before they held "archs": the variable the build ran with.
    assert built_archs({"env": {"FLASH_ATTN_CUDA_ARCHS": "90;120"}}) == ("90", "120")
    assert built_archs({"env": {}}) is None
    assert built_archs(None) is None
    assert built_archs({"archs": []}) is None


def test_rebuild_reason_names_what_the_build_lacks():
    from pyinfra_sglang.python_env.flash_attn_build_plan import rebuild_reason

    assert rebuild_reason(("90",), ("90",), None) is None
    assert rebuild_reason(("90", "120"), ("120",), None) is None
    assert rebuild_reason(("90a",), ("90",), None) is None
    assert rebuild_reason(("90",), (), None) is None  # no GPUs to judge against
    assert rebuild_reason(("90",), ("120",), None) == (
        "the GPUs found are 120: the installed build has no kernels for 120 (built for 90)"
    )
    assert rebuild_reason(("90",), ("90", "120"), None) == (
        "the GPUs found are 90, 120: the installed build has no kernels for 120 (built for 90)"
    )
    assert "no build record" in rebuild_reason(None, ("90",), None)
    # The inventory's list is built exactly, whatever the GPUs.
    assert rebuild_reason(("90", "120"), ("120",), ["120", "90"]) is None
    assert rebuild_reason(("90", "120"), ("120",), ["120"]) == (
        "flash_attn_cuda_archs is 120, the installed build is for 90, 120"
    )


def test_a_record_file_is_read_as_json_or_not_at_all():
    from pyinfra_sglang.parsers.system import parse_json_record

    line = '{"version": "2.8.3", "seconds": 1500, "archs": ["90"], "env": {}}'
    assert parse_json_record([line])["archs"] == ["90"]
    assert parse_json_record([]) is None  # no such file
    assert parse_json_record([line[:20]]) is None  # a cut-off write
    assert parse_json_record(["[1, 2]"]) is None


# --- progress lines of a running build ----------------------------------------------------

BUILD_LOG = Path(__file__).resolve().parents[1] / "fixtures" / "flash-attn" / "uv-verbose-build.log"


def log_until(marker: str) -> str:
    """The synthetic build log as it stood when ``marker`` was its last line."""
    text = BUILD_LOG.read_text()
    return text[: text.index(marker) + len(marker)] + "\n"


def test_ninja_steps_are_the_last_n_of_m_in_the_log():
    assert ninja_steps(log_until("Compiling objects...")) is None  # before ninja
    assert ninja_steps(log_until("DEBUG [1/73]")) == (1, 73)
    assert ninja_steps(log_until("DEBUG [40/73]")) == (40, 73)
    assert ninja_steps(BUILD_LOG.read_text()) == (73, 73)
    # Not a status line: brackets inside a line, a count past its total.
    assert ninja_steps("warning: a[3/4] b\n[9/4] x\n") is None


def test_progress_lines_give_elapsed_steps_and_an_eta_from_the_compile_rate():
    progress = BuildProgress()
    assert progress.line(61, log_until("Compiling objects...")) == (
        "building for 1 min 01 s; no compile steps in the log yet"
    )
    # ninja seen for the first time: no rate yet, so no ETA.
    assert progress.line(125, log_until("DEBUG [10/73]")) == (
        "building for 2 min 05 s; compile steps 10/73 (14%)"
    )
    # 20 more steps in 600 s: 30 s a step, 43 steps left.
    assert progress.line(725, log_until("DEBUG [30/73]")) == (
        "building for 12 min 05 s; compile steps 30/73 (41%), about 21 min 30 s left"
    )
    assert progress.line(3725, BUILD_LOG.read_text()) == (
        "building for 1 h 02 min; compile steps 73/73 (100%), about 0 s left"
    )


def test_a_log_that_stalls_gives_no_eta():
    progress = BuildProgress()
    progress.line(60, log_until("DEBUG [5/73]"))
    assert progress.line(120, log_until("DEBUG [5/73]")).endswith("compile steps 5/73 (7%)")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.6, "1 min 00 s"), (605, "10 min 05 s"), (7260, "2 h 01 min")],
)
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text
