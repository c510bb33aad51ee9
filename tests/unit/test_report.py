"""The report page (pyinfra_sglang/report/), built from real captures (tests/report_runs.py):
what it holds, that it escapes what it reads, that the same input gives the same bytes, and
the refusals of `pyinfra-sglang report`. Chromium renders it in tests/browser/."""

from __future__ import annotations

import base64
import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.diagnosis.samples import read_json_lines
from pyinfra_sglang.diagnosis.steps import steps_on_sample_axis
from pyinfra_sglang.report.page import read_run, write_report
from tests.report_runs import SAMPLER, h200_sampler_run, host_run

DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in DATA_URI.findall(page)]


# Each page is drawn once per module (matplotlib's charts are most of this module's time) and
# read by every test that checks it; a test that changes what it reads or writes draws its own.


@pytest.fixture(scope="module")
def h200_page(tmp_path_factory) -> Path:
    """The report of the real H200 sampler run, written into ``out`` beside its run folder."""
    tmp = tmp_path_factory.mktemp("h200")
    return write_report(read_run(h200_sampler_run(tmp)), tmp / "out")


@pytest.fixture(scope="module")
def by_command(tmp_path_factory):
    """`pyinfra-sglang report` on test-host run 1 (host-a), then on it and run 2 (host-b): the
    runs, and what each call returned and printed."""
    tmp = tmp_path_factory.mktemp("by-command")
    a, b = host_run(tmp, 1, "host-a"), host_run(tmp, 2, "host-b")
    calls = {}
    for key, argv in (("single", [str(a)]), ("ab", [str(a), str(b)])):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["report", *argv])
        calls[key] = (code, out.getvalue(), err.getvalue())
    return a, b, calls


def test_page_of_the_h200_capture_holds_the_charts_and_the_findings(h200_page):
    page_path, out = h200_page, h200_page.parent
    page = page_path.read_text()
    assert "<h1>Benchmark report: h200-vm / 20261130T191005Z</h1>" in page
    # The throughput chart and one timeline per GPU, in the page and beside it, the same bytes.
    files = ["throughput.png", "gpu0-timeline.png", "gpu1-timeline.png"]
    assert _images(page) == [(out / f).read_bytes() for f in files]
    assert all(f'href="{f}"' in page for f in files)
    # The diagnosis beside the charts: the copies made GPU 0 interconnect-bound.
    assert "<code>interconnect-bound</code>" in page and 'class="warn"' in page
    assert "Findings" in page and "output tok/s" in page
    # No script, nothing loaded from elsewhere: data URIs and relative links only.
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)="(?!data:)[a-z]+:', page)


def test_the_same_run_gives_the_same_bytes(h200_page, tmp_path):
    # The module's page, and the same run read again and written again elsewhere.
    run = read_run(h200_sampler_run(tmp_path))
    first, second = h200_page, write_report(run, tmp_path / "b")
    for name in ("report.html", "throughput.png", "gpu0-timeline.png", "gpu1-timeline.png"):
        assert (first.parent / name).read_bytes() == (second.parent / name).read_bytes(), name


def test_steps_land_on_the_sampler_time_axis(tmp_path):
    folder = h200_sampler_run(tmp_path)
    samples = read_run(folder).results["samples"]
    steps = steps_on_sample_axis(read_json_lines(folder / "steps.jsonl"), samples)
    phases = json.loads((SAMPLER / "phases.json").read_text())
    assert [s.label for s in steps] == list(phases)
    # The sampler's first line: t 0.1 at Unix 1796017808.096; h2d began at 1796017819.597.
    h2d = steps[1]
    assert h2d.start == pytest.approx(1796017819.5968127 - 1796017808.096 + 0.1)
    assert h2d.end - h2d.start == pytest.approx(4.011, abs=0.001)
    # The bench script's lines are named by concurrency, and by repeat when there are several.
    lines = [
        {"repeat": r, "concurrency": c, "start": 1796017810.0 + r, "end": 1796017810.5 + r}
        for r, c in ((1, 4), (2, 4))
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert [s.label for s in steps_on_sample_axis(read_json_lines(path), samples)] == [
        "c=4 #1",
        "c=4 #2",
    ]


def test_a_run_from_a_test_host_names_its_settings_and_steps(tmp_path, by_command):
    run = read_run(host_run(tmp_path))
    assert run.name == "127.0.0.2 / 20261201T085652Z"
    assert [(s.label, round(s.end - s.start, 2)) for s in run.steps] == [
        ("c=1", 0.89),
        ("c=4", 0.54),
    ]
    # The same run's page, as `pyinfra-sglang report` wrote it beside the run.
    folder = by_command[0]
    assert read_run(folder).steps == run.steps
    page = (folder / "report" / "report.html").read_text()
    assert "sglang_version: &quot;0.5.23&quot;" in page and "<code>host-bound</code>" in page
    assert run.notes == ()


def test_values_from_the_results_are_escaped(tmp_path):
    evil = '<img src=x onerror="alert(1)">'
    folder = host_run(tmp_path, host="<i>gpu&1<i>")
    settings = json.loads((folder / "settings.json").read_text())
    settings["settings"]["profile"] = evil
    (folder / "settings.json").write_text(json.dumps(settings))
    page = write_report(read_run(folder), tmp_path / "out").read_text()
    assert evil not in page and "<i>gpu&1" not in page
    assert "&lt;i&gt;gpu&amp;1&lt;i&gt;" in page and "&lt;img src=x onerror=" in page


def test_without_steps_or_roofline_the_page_says_what_is_missing(tmp_path):
    folder = host_run(tmp_path)
    (folder / "steps.jsonl").unlink()
    (folder / "profile.json").write_text('{"profile": "../../x", "gpu": "H200", "tp_size": 1}')
    page = write_report(read_run(folder), tmp_path / "out").read_text()
    assert "no decode roofline: profile.json: profile is" in page
    assert "no steps.jsonl with sampler times: the benchmark&#x27;s steps are not marked" in page


def test_ab_page_compares_two_runs(by_command):
    # As `pyinfra-sglang report A B` wrote it, beside B (write_ab_report, under the command).
    _, b, _ = by_command
    page_path = b / "ab-report" / "report.html"
    page = page_path.read_text()
    assert (
        "<h1>A/B: host-a / 20261201T085652Z (A) against host-b / 20261201T085652Z (B)</h1>" in page
    )
    # One run a side: a difference, but no verdict of noise or real.
    assert page.count("not enough runs to tell") == 2
    assert len(_images(page)) == 5  # throughput of both, and 2 GPUs a side
    assert {p.name for p in page_path.parent.iterdir()} == {
        "report.html",
        "throughput.png",
        "a-gpu0-timeline.png",
        "a-gpu1-timeline.png",
        "b-gpu0-timeline.png",
        "b-gpu1-timeline.png",
    }


def _report(argv, capsys) -> tuple[int, str, str]:
    code = main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_report_command_writes_beside_the_run_and_prints_the_page(tmp_path, capsys, by_command):
    folder, other, calls = by_command
    code, out, err = calls["single"]
    assert (code, err) == (0, "") and out == f"{folder / 'report' / 'report.html'}\n"
    code, out, _ = calls["ab"]
    assert code == 0 and out == f"{other / 'ab-report' / 'report.html'}\n"
    folder = host_run(tmp_path)
    code, out, _ = _report([str(folder), "--output", str(tmp_path / "x")], capsys)
    assert code == 0 and out == f"{tmp_path / 'x' / 'report.html'}\n"


def test_report_command_says_what_it_expected_and_what_it_found(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = _report([str(empty)], capsys)
    assert code == 2 and out == ""
    assert "no results: expected samples.jsonl (the GPU sampler's) and bench.jsonl" in err
    assert err.rstrip().endswith("found an empty folder")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "bench.log").write_text("x")
    (logs / "sub").mkdir()
    assert "found bench.log, sub/" in _report([str(logs)], capsys)[2]
    # A host's folder: name a run in it.
    run = host_run(tmp_path)
    err = _report([str(run.parent)], capsys)[2]
    assert f"it holds run folders: give one, e.g. {run}" in err
    assert "no such folder" in _report([str(tmp_path / "nope")], capsys)[2]
