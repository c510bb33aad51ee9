"""Every `pyinfra-sglang` subcommand (pyinfra_sglang/cli/main.py COMMANDS), given bad input: a clear
message on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import COMMANDS, main
from tests.unit.test_sglang_standin import TIMEOUT, free_port

GOOD_SAMPLE = {"t": 0.1, "gpus": [{"index": 0, "gpu_util": 5}], "cpu": None}


def _folder(root: Path, name: str, files: dict[str, object]) -> str:
    """A folder holding ``files``: text as it is, anything else as JSON (a list of dicts
    written to a .jsonl file: one per line)."""
    folder = root / name
    folder.mkdir()
    for file, content in files.items():
        if isinstance(content, bytes):
            folder.joinpath(file).write_bytes(content)
        elif isinstance(content, str):
            folder.joinpath(file).write_text(content)
        elif file.endswith(".jsonl"):
            folder.joinpath(file).write_text("".join(json.dumps(c) + "\n" for c in content))
        else:
            folder.joinpath(file).write_text(json.dumps(content))
    return str(folder)


def bad_inputs(tmp: Path) -> dict[str, list[list[str]]]:
    """Per subcommand, argument lists each of which it must refuse with exit status 2."""
    binary = tmp / "binary"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    folder = tmp / "a-folder"
    folder.mkdir()
    missing = str(tmp / "missing")
    good_inventory = tmp / "good_inventory.py"
    good_inventory.write_text("gpu_hosts = [('gpu-1', {'sglang_model_profile': 'dense-bf16'})]\n")
    broken = tmp / "broken_inventory.py"
    broken.write_text("gpu_hosts = [('gpu-1', {\n")
    raising = tmp / "raising_inventory.py"
    raising.write_text("raise RuntimeError('the inventory failed')\n")
    empty = tmp / "empty_inventory.py"
    empty.write_text("# no hosts\n")
    no_markers = tmp / "no_markers.md"
    no_markers.write_text("# no reference block here\n")
    csv = tmp / "query.csv"
    csv.write_text("index, name, pcie.link.gen.current\nabc, NVIDIA H200, 5\n")

    def results(name: str, **files: object) -> str:
        return _folder(tmp, name, {"samples.jsonl": [GOOD_SAMPLE], **files})

    def bench(name: str, lines: object) -> str:
        return _folder(tmp, name, {"bench.jsonl": lines})

    good_bench = bench("good-bench", [{"max_concurrency": 1, "output_throughput": 10.0}] * 2)
    render = ["--profile", "dense-bf16", "--gpus", "1", "--arch", "sm_90"]
    render += ["--sglang-version", "0.5.23"]
    url = f"http://127.0.0.1:{free_port()}"
    cases = {
        "inventory-reference": [
            ["--write", missing],
            ["--write", str(folder)],
            ["--write", str(binary)],
            ["--write", str(no_markers)],
            ["--no-such-option"],
        ],
        "validate": [
            [],
            [missing + ".py"],
            [str(folder)],
            [str(binary)],
            [str(broken)],
            [str(raising)],
            [str(empty)],
            [str(good_inventory), "--data", "no-equals-sign"],
            [str(good_inventory), "--data", "=value"],
        ],
        "build-plan": [
            [],
            ["--cores", "8"],
            ["--cores", "0", "--mem-gb", "64"],
            ["--cores", "-4", "--mem-gb", "64"],
            ["--cores", "many", "--mem-gb", "64"],
            ["--cores", "8", "--mem-gb", "nan"],
            ["--cores", "8", "--mem-gb", "inf"],
            ["--cores", "8", "--mem-gb", "0"],
            ["--cores", "8", "--mem-gb", "-64"],
            ["--cores", "8", "--mem-gb", "64", "--memory-fraction", "5"],
            ["--cores", "8", "--mem-gb", "64", "--memory-fraction", "0"],
            ["--cores", "8", "--mem-gb", "64", "--memory-fraction", "nan"],
            ["--cores", "8", "--mem-gb", "64", "--archs", "hopper"],
            ["--cores", "8", "--mem-gb", "64", "--archs", ","],
        ],
        "plan": [
            [],
            ["--model", "x/y", "--gpus", "8"],
            ["--model", missing, "--gpus", "8", "--gpu-model", "NVIDIA H200"],
            ["--model", str(folder), "--gpus", "8", "--gpu-model", "NVIDIA H200"],
            ["--model", "x/y", "--gpus", "0", "--gpu-model", "NVIDIA H200"],
            ["--model", "x/y", "--gpus", "8", "--gpu-model", "H9000"],
            ["--model", "x/y", "--gpus", "8", "--gpu-model", "NVIDIA H200", "--hf-endpoint", url],
            ["--model", "x/y", "--gpus", "8", "--gpu-model", "NVIDIA H200", "--data", "a=b"],
            ["--inventory", str(good_inventory)],
            ["--profile", "../../etc/x", "--model", "x/y", "--gpus", "8", "--gpu-model", "H200"],
        ],
        "profile": [
            [],
            ["new"],
            ["old", "x/y"],
            ["new", missing],
            ["new", str(folder)],
            ["new", "x/y", "--hf-endpoint", url],
            ["new", "x/y", "--name", "../x"],
            ["new", "x/y", "--template", "a/b"],
        ],
        "render": [
            render[:2],
            [*render, "--gpus", "0"],
            [*render, "--profile", "../../etc/x"],
            [*render, "--profile", "a/b"],
            [*render, "--gpu-mem-gb", "nan"],
            [*render, "--gpu-mem-gb", "-80"],
            [*render, "--port", "0"],
            [*render, "--port", "70000"],
            [*render, "--arch", "hopper"],
            [*render, "--sglang-version", "latest"],
        ],
        "packages": [
            [],
            ["--platform", "debian13"],
            ["--platform", "debian12", "--branch", "550"],
            ["--platform", "debian12", "--branch", "x"],
            ["--platform", "debian12", "--install", "desktop"],
            ["--platform", "debian12", "--modules", "nouveau"],
        ],
        "decode-check": [
            [],
            ["--url", url, "--timeout", "0"],
            ["--url", url, "--timeout", "-1"],
            ["--url", url, "--timeout", "nan"],
            ["--url", url, "--timeout", "inf"],
            ["--url", url, "--expect", ""],
            ["--url", url, "--expect", " \t"],
            ["--url", "ftp://127.0.0.1/"],
            ["--url", "http://127.0.0.1:99999"],
            ["--url", "127.0.0.1:30000"],
            ["--url", url, "--api-key-file", missing],
            ["--url", url, "--api-key-file", str(folder)],
            ["--url", url, "--api-key-file", str(binary)],
        ],
        "analyze": [
            [],
            ["--topo", missing],
            ["--topo", str(folder)],
            ["--smi-q", str(folder)],
            ["--query-csv", str(csv)],
        ],
        "diagnose": [
            [],
            [missing],
            [str(binary)],  # a file, not a folder
            [str(folder)],  # no samples
            [_folder(tmp, "binary-samples", {"samples.jsonl": b"\xff\xfe\x00"})],
            [_folder(tmp, "samples-list", {"samples.json": [1, 2]})],
            [_folder(tmp, "capture-strings", {"samples.json": [{"t": 0, "0": ["a"] * 6}]})],
            [_folder(tmp, "sample-list", {"samples.jsonl": [[1, 2]]})],
            [_folder(tmp, "sample-t", {"samples.jsonl": [{**GOOD_SAMPLE, "t": "now"}]})],
            [_folder(tmp, "gpus-text", {"samples.jsonl": [{**GOOD_SAMPLE, "gpus": "0"}]})],
            [
                _folder(
                    tmp,
                    "util-text",
                    {"samples.jsonl": [{"t": 0, "gpus": [{"index": 0, "gpu_util": "high"}]}]},
                )
            ],
            [_folder(tmp, "index-text", {"samples.jsonl": [{"t": 0, "gpus": [{"index": "0"}]}]})],
            [results("profile-list", **{"profile.json": [1, 2]})],
            [
                results(
                    "profile-path",
                    **{"profile.json": {"profile": "../../x", "gpu": "H200", "tp_size": 1}},
                )
            ],
            [
                results(
                    "profile-tp",
                    **{
                        "profile.json": {
                            "profile": "dense-bf16",
                            "gpu": "NVIDIA H200",
                            "tp_size": "8",
                        }
                    },
                )
            ],
            [
                results(
                    "profile-gpu",
                    **{"profile.json": {"profile": "dense-bf16", "gpu": 7, "tp_size": 8}},
                )
            ],
            [
                results(
                    "profile-dirs",
                    **{
                        "profile.json": {
                            "profile": "dense-bf16",
                            "gpu": "NVIDIA H200",
                            "tp_size": 8,
                            "profile_dirs": "x",
                        }
                    },
                )
            ],
            [
                results(
                    "profile-zero",
                    **{
                        "profile.json": {
                            "tp_size": 1,
                            "memory_bandwidth_gbs": 0,
                            "active_params_b": 1,
                            "bytes_per_param": 1,
                        }
                    },
                )
            ],
            [
                results(
                    "profile-huge",
                    **{
                        "profile.json": {
                            "tp_size": 1,
                            "memory_bandwidth_gbs": 1,
                            "active_params_b": 1,
                            "bytes_per_param": 1e308 * 10,
                        }
                    },
                )
            ],
            [results("links-list", **{"links.json": [1]})],
            [results("links-index", **{"links.json": {"gpus": [{"index": None}]}})],
            [
                results(
                    "links-pcie",
                    **{"links.json": {"gpus": [{"index": 0, "pcie": {"gen_max": "5"}}]}},
                )
            ],
            [results("links-vm", **{"links.json": {"virtualization": {"vm": 1}}})],
            [results("bench-list", **{"bench.jsonl": [[1]]})],
            [
                results(
                    "bench-text",
                    **{"bench.jsonl": [{"max_concurrency": 1, "output_throughput": "fast"}]},
                )
            ],
            [results("server-list", **{"server_metrics.json": [0.9]})],
            [
                results(
                    "server-text",
                    **{"server_metrics.json": {"kv_cache_usage": "full", "queued_requests": 3}},
                )
            ],
            [
                results(
                    "cpu-text", **{"samples.jsonl": [{**GOOD_SAMPLE, "cpu": {"processes": None}}]}
                )
            ],
        ],
        "ab-compare": [
            [],
            ["--a", good_bench],
            ["--a", missing, "--b", good_bench],
            ["--a", str(folder), "--b", good_bench],
            ["--a", bench("bench-binary", b"\xff\xfe\x00\n"), "--b", good_bench],
            ["--a", bench("bench-rows", [[1, 2]]), "--b", good_bench],
            [
                "--a",
                bench("bench-strings", [{"max_concurrency": 1, "output_throughput": "x"}]),
                "--b",
                good_bench,
            ],
            [
                "--a",
                bench("bench-concurrency", [{"max_concurrency": "one", "output_throughput": 1.0}]),
                "--b",
                good_bench,
            ],
            [
                "--a",
                bench("bench-nan", [{"max_concurrency": 1, "output_throughput": float("nan")}]),
                "--b",
                good_bench,
            ],
            [
                "--a",
                bench("bench-other", [{"max_concurrency": 8, "output_throughput": 1.0}]),
                "--b",
                good_bench,
            ],
        ],
    }
    timed = {**GOOD_SAMPLE, "time": 1796017808.0}
    blocker = tmp / "a-file-in-the-way"
    blocker.write_text("not a folder\n")
    cases["report"] = [
        # Every folder diagnose refuses, report refuses too: it reads them the same way; but
        # for a profile.json without a roofline's numbers, where it leaves the roofline out
        # and says why (tests/unit/test_report.py), as deploy/bench.py's diagnosis does.
        *[argv for argv in cases["diagnose"] if argv and "/profile-" not in argv[0]],
        [_folder(tmp, "steps-text", {"samples.jsonl": [timed], "steps.jsonl": "[1]\n{}\n"})],
        [_folder(tmp, "steps-start", {"samples.jsonl": [timed], "steps.jsonl": [{"start": "x"}]})],
        [results("good-a"), missing],  # side B missing
        [results("good-b"), "--output", str(blocker)],  # cannot write there
    ]
    return cases


def _run(argv: list[str]) -> int | str:
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code
    except Exception as error:  # what would reach the user as a traceback
        return f"raised {type(error).__name__}: {error}"


def test_every_subcommand_refuses_bad_input_with_exit_2_and_no_traceback(tmp_path, capsys):
    cases = bad_inputs(tmp_path)
    assert set(cases) == {command.name for command in COMMANDS}
    problems = []
    for name, argvs in cases.items():
        for argv in argvs:
            code = _run([name, *argv])
            out, err = capsys.readouterr()
            if code != 2 or "Traceback" in err or not err.strip():
                problems.append(f"{name} {argv}: exit {code}, stderr {err[-300:]!r}")
    assert problems == []


ENTRY_POINT_CASES = [
    ["build-plan", "--cores", "1", "--mem-gb", "nan"],
    ["analyze", "--topo", "."],
    ["diagnose", "."],
]


def test_the_installed_entry_point_shows_no_traceback(tmp_path):
    """Through `python -m pyinfra_sglang.cli` in a fresh interpreter, as a user runs it: once,
    for the wiring from the entry point to main(); the cases below run main() itself."""
    tmp_path.joinpath("samples.json").write_text("[1, 2]")  # for diagnose
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra_sglang.cli", *ENTRY_POINT_CASES[-1]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.strip()


@pytest.mark.parametrize("argv", ENTRY_POINT_CASES)
def test_the_entry_points_cases_show_no_traceback(tmp_path, monkeypatch, capsys, argv):
    tmp_path.joinpath("samples.json").write_text("[1, 2]")  # for diagnose
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")  # a warning would be a line on a user's stderr
        code = _run(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.strip() and not warned, (code, err)


RENDER = ["render", "--profile", "dense-bf16", "--gpus", "2", "--arch", "sm_90"]
RENDER += ["--sglang-version", "0.5.23"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["build-plan", "--cores", "0", "--mem-gb", "64"], "not a positive whole number: '0'"),
        (["build-plan", "--cores", "8", "--mem-gb", "nan"], "not a finite number: 'nan'"),
        (["build-plan", "--cores", "8", "--mem-gb", "-1"], "not a number of GB above 0"),
        (
            ["build-plan", "--cores", "8", "--mem-gb", "64", "--memory-fraction", "5"],
            "not a fraction above 0 and at most 1: '5'",
        ),
        (
            ["render", "--profile", "../../x", "--gpus", "1", "--arch", "sm_90"],
            "not a profile name",
        ),
        # Issue 35 N8: 10^12 nodes hung render (its divisors counted one by one); GPUs,
        # cores and memory without bound; the rendezvous address and bind unparsed.
        (
            [*RENDER, "--nnodes", "1000000000000", "--dist-init-addr", "10.0.0.1:5000"],
            "more nodes than 1024",
        ),
        (["render", "--profile", "dense-bf16", "--gpus", "100000", "--arch", "sm_90"], "64"),
        (
            ["build-plan", "--cores", "100000000000", "--mem-gb", "64"],
            "more cores than 4096",
        ),
        (["build-plan", "--cores", "8", "--mem-gb", "1e308"], "at most 1000000"),
        ([*RENDER, "--host", "0.0.0.0 --api-key x"], "not an IP address"),
        ([*RENDER, "--host", "gpu-01.example.internal"], "not an IP address"),
        (
            [*RENDER, "--nnodes", "2", "--dist-init-addr", "head:99999"],
            "dist_init_addr 'head:99999' is not HOST:PORT",
        ),
    ],
)
def test_refusals_name_the_argument_and_what_is_wrong(argv, message, capsys):
    assert _run(argv) == 2
    assert message in capsys.readouterr().err


def test_analyze_names_a_missing_file_or_folder(tmp_path, capsys):
    assert _run(["analyze", "--topo", str(tmp_path / "nope.txt")]) == 2
    assert f"analyze: cannot read {tmp_path / 'nope.txt'}: No such file" in capsys.readouterr().err
    assert _run(["analyze", "--p2p", str(tmp_path)]) == 2
    assert "Is a directory" in capsys.readouterr().err


def test_validate_refuses_what_it_cannot_load(tmp_path, capsys):
    (tmp_path / "inv.py").write_text("gpu_hosts = [\n")
    assert _run(["validate", str(tmp_path / "inv.py")]) == 2
    assert "validate: cannot load the inventory" in capsys.readouterr().err
    assert _run(["validate", str(tmp_path / "none.py")]) == 2
    assert "no such file, not an inventory file" in capsys.readouterr().err
    (tmp_path / "inv.py").write_text("# nothing\n")
    assert _run(["validate", str(tmp_path / "inv.py")]) == 2
    assert ": no hosts" in capsys.readouterr().err


# --- hostile inputs: refused fast, naming the file and the cap (data/diagnosis.toml [limits]) --

DEEP = "[" * 100_000 + "]" * 100_000


def _timed_samples(count: int) -> list[dict]:
    return [{**GOOD_SAMPLE, "t": 0.1 * n, "time": 1796017808.0 + 0.1 * n} for n in range(count)]


def hostile_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    """(argv, what its one-line refusal must say) for inputs past a cap or absurd."""
    many_gpus = {"t": 0.1, "gpus": [{"index": i, "gpu_util": 5} for i in range(100_000)]}
    steps = [
        {"concurrency": 1, "start": 1796017808.0 + n * 0.01, "end": 1796017808.0 + n * 0.01}
        for n in range(20_000)
    ]
    huge = {"max_concurrency": 1, "output_throughput": 1e308}
    good_bench = [{"max_concurrency": 1, "output_throughput": 10.0}] * 2
    cases = [
        (
            ["diagnose", _folder(tmp, "deep", {"samples.jsonl": DEEP + "\n"})],
            "samples.jsonl: JSON nested at least 100000 levels deep, over the cap of 64",
        ),
        (
            ["diagnose", _folder(tmp, "deep-capture", {"samples.json": DEEP})],
            "samples.json: JSON nested at least 100000 levels deep, over the cap of 64",
        ),
        (
            ["diagnose", _folder(tmp, "gpus", {"samples.jsonl": [many_gpus]})],
            "sample 1: 100000 GPUs in one sample, over the cap of 32 (max_gpus in",
        ),
        (
            [
                "diagnose",
                _folder(
                    tmp,
                    "util",
                    {"samples.jsonl": [{"t": 0, "gpus": [{"index": 0, "power_w": 1e308}]}]},
                ),
            ],
            "gpus[0]: power_w is 1e+308, not a number from 0 to 1e+20",
        ),
        (
            [
                "diagnose",
                _folder(tmp, "index", {"samples.jsonl": [{"t": 0, "gpus": [{"index": 10**400}]}]}),
            ],
            "gpus[0]: index is 1000000000000000000000000000000000000..., not a GPU index (0 to 31",
        ),
        (
            [
                "diagnose",
                _folder(tmp, "bench-huge", {"samples.jsonl": [GOOD_SAMPLE], "bench.jsonl": [huge]}),
            ],
            "bench.jsonl: line 1: output_throughput is 1e+308, not a number from 0 to 1e+20",
        ),
        (
            [
                "diagnose",
                _folder(tmp, "bench-deep", {"samples.jsonl": [GOOD_SAMPLE], "bench.jsonl": DEEP}),
            ],
            "bench.jsonl: JSON nested at least 100000 levels deep",
        ),
        # Issue 35 N11: a GPU listed twice counted twice; concurrency 10^18 was judged.
        (
            [
                "diagnose",
                _folder(
                    tmp,
                    "gpu-twice",
                    {"samples.jsonl": [{"t": 0, "gpus": [{"index": 0}, {"index": 0}]}]},
                ),
            ],
            "gpus[1]: GPU 0 is listed twice in one sample",
        ),
        (
            [
                "diagnose",
                _folder(
                    tmp,
                    "bench-concurrency",
                    {
                        "samples.jsonl": [GOOD_SAMPLE],
                        "bench.jsonl": [{"max_concurrency": 10**18, "output_throughput": 1.0}],
                    },
                ),
            ],
            "bench.jsonl: line 1: max_concurrency is 1000000000000000000, not a whole number",
        ),
        (
            [
                "report",
                _folder(tmp, "steps", {"samples.jsonl": _timed_samples(3), "steps.jsonl": steps}),
            ],
            "steps.jsonl: 20000 lines, over the cap of 1000 (max_steps in",
        ),
        (
            [
                "report",
                _folder(
                    tmp,
                    "overlap",
                    {
                        "samples.jsonl": _timed_samples(3),
                        "steps.jsonl": [
                            {"concurrency": 1, "start": 1796017808.0, "end": 1796017809.0},
                            {"concurrency": 2, "start": 1796017808.5, "end": 1796017810.0},
                        ],
                    },
                ),
            ],
            "steps.jsonl: line 2: starts before line 1 ends",
        ),
        (
            [
                "ab-compare",
                "--a",
                _folder(tmp, "ab-huge", {"bench.jsonl": [huge] * 2}),
                "--b",
                _folder(tmp, "ab-good", {"bench.jsonl": good_bench}),
            ],
            "bench.jsonl: line 1: output_throughput is 1e+308, not tok/s",
        ),
        (
            [
                "ab-compare",
                "--a",
                _folder(tmp, "ab-deep", {"bench.jsonl": DEEP}),
                "--b",
                str(tmp / "ab-good"),
            ],
            "bench.jsonl: JSON nested at least 100000 levels deep, over the cap of 64",
        ),
        (
            [
                "ab-compare",
                "--a",
                _folder(tmp, "ab-c", {"bench.jsonl": [{"max_concurrency": 10**400}] * 2}),
                "--b",
                str(tmp / "ab-good"),
            ],
            "max_concurrency is 1000000000000000000000000000000000000..., not a whole number",
        ),
    ]
    return cases


def test_hostile_inputs_are_refused_in_one_line_naming_the_cap(tmp_path, capsys):
    """As the entry point runs them (main(); test_the_installed_entry_point_shows_no_traceback
    runs it as `python -m`): exit 2, one line on stderr that names the file, what exceeded
    which cap; no traceback (main() raising is what reaches a user as one), no warning (a
    user would see it on stderr). Before the caps these raised RecursionError or
    OverflowError, or ran past 120 s. The time bound is a guard only."""
    problems = []
    for argv, message in hostile_inputs(tmp_path):
        started = time.monotonic()
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            code = _run(argv)
        took = time.monotonic() - started
        err = capsys.readouterr().err
        err += "".join(f"{w.category.__name__}: {w.message}\n" for w in warned)
        if code != 2 or "Traceback" in err or message not in err or took > 20:
            problems.append(f"{argv[:2]}: exit {code} in {took:.0f} s, {err[-300:]!r}")
        elif len(err.strip().splitlines()) != 1:
            problems.append(f"{argv}: more than one line: {err!r}")
    assert problems == []


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ("", "no sample"),
        ("[]", "no sample"),
        (json.dumps({"t": 0.1, "gpus": [], "cpu": None}) + "\n", "1 sample(s), none with a GPU"),
    ],
)
@pytest.mark.parametrize("command", ["diagnose", "report"])
def test_samples_without_a_gpu_reading_are_refused_as_nothing_to_diagnose(
    tmp_path, capsys, content, held, command
):
    """An empty samples file used to diagnose with no finding at all, which reads as "all
    well": it is refused (exit 2), saying there is nothing to diagnose."""
    name = "samples.json" if content == "[]" else "samples.jsonl"
    folder = _folder(tmp_path, "run", {name: content})
    assert _run([command, folder]) == 2
    err = capsys.readouterr().err
    assert f"{name}: no GPU samples ({held}" in err and "nothing to diagnose" in err


def test_render_says_a_public_bind_needs_a_key(capsys):
    """Issue 35 N8: a public --host rendered without a word."""
    assert _run([*RENDER, "--host", "0.0.0.0"]) == 0
    assert "--host 0.0.0.0 is not a loopback address" in capsys.readouterr().err
    assert _run([*RENDER, "--host", "127.0.0.1"]) == 0
    assert "loopback" not in capsys.readouterr().err


def test_a_broken_data_file_is_one_line_naming_it_not_a_traceback(tmp_path, capsys):
    """Issue 35 N11: a syntax error in data/gpus.toml ended in a traceback; a bad
    data/tuning.toml was reported as a problem of sglang_host."""
    from unittest.mock import patch

    from pyinfra_sglang import data

    real = data._read

    def broken(name):
        if name in ("gpus", "tuning"):
            raise data.DataError(f"pyinfra_sglang/data/{name}.toml: Expected '=' (at line 3)")
        return real(name)

    inventory = tmp_path / "inv.py"
    inventory.write_text("gpus = [('gpu-1', {'ssh_strict_host_key_checking': 'yes'})]\n")
    caches = (data._model,)
    try:
        for cache in caches:
            cache.cache_clear()
        with patch.object(data, "_read", broken):
            assert _run(["validate", str(inventory)]) == 2
    finally:
        for cache in caches:
            cache.cache_clear()
    err = capsys.readouterr().err
    assert "pyinfra_sglang/data/" in err and "Expected '='" in err
    assert "Traceback" not in err and "sglang_host" not in err
