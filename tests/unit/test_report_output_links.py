"""`pyinfra-sglang report` writes only plain files of its own in its output folder: a results
folder from someone else cannot point report.html, a PNG or the folder itself at another file
the user can write (a symbolic link is refused, exit 2, the victim unchanged)."""

from __future__ import annotations

import os

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.report.page import UnsafeOutputError, read_run, write_ab_report, write_report
from tests.report_runs import h200_sampler_run, host_run

VICTIM_TEXT = "the user's own file\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim" / "notes.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def _report(argv, capsys) -> tuple[int, str, str]:
    code = main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["report.html", "throughput.png", "gpu1-timeline.png"])
def test_write_report_refuses_an_output_file_that_is_a_link(tmp_path, victim, name):
    run = read_run(h200_sampler_run(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    with pytest.raises(UnsafeOutputError, match="symbolic link") as raised:
        write_report(run, out)
    assert str(out / name) in str(raised.value) and str(victim) in str(raised.value)
    assert victim.read_text() == VICTIM_TEXT and (out / name).is_symlink()


def test_a_dangling_link_creates_nothing_where_it_points(tmp_path):
    run = read_run(h200_sampler_run(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere" / "planted.html"
    target.parent.mkdir()
    (out / "report.html").symlink_to(target)
    with pytest.raises(UnsafeOutputError):
        write_report(run, out)
    assert not target.exists()


def test_write_ab_report_refuses_a_linked_timeline(tmp_path, victim):
    run_a, run_b = read_run(host_run(tmp_path)), read_run(host_run(tmp_path, 2, "other"))
    out = tmp_path / "ab"
    out.mkdir()
    (out / "b-gpu0-timeline.png").symlink_to(victim)
    with pytest.raises(UnsafeOutputError, match="b-gpu0-timeline.png"):
        write_ab_report(run_a, run_b, out)
    assert victim.read_text() == VICTIM_TEXT


def test_an_output_folder_that_is_a_link_is_refused(tmp_path, victim):
    run = read_run(h200_sampler_run(tmp_path))
    link = tmp_path / "out"
    link.symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(UnsafeOutputError, match="output folder is a symbolic link"):
        write_report(run, link)
    assert sorted(os.listdir(victim.parent)) == ["notes.txt"]


def test_a_hard_link_is_replaced_not_written_through(tmp_path, victim):
    run = read_run(h200_sampler_run(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / "report.html")
    page = write_report(run, out)
    assert victim.read_text() == VICTIM_TEXT
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_report_command_names_the_link_and_exits_2(tmp_path, victim, capsys):
    folder = host_run(tmp_path)
    (folder / "report").mkdir()
    (folder / "report" / "report.html").symlink_to(victim)
    code, out, err = _report([str(folder)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"report: {folder / 'report' / 'report.html'}: a symbolic link")
    assert "Traceback" not in err and victim.read_text() == VICTIM_TEXT
    # The folder itself, given as --output or found as RESULTS_DIR_B/ab-report.
    other = host_run(tmp_path, 2, "other")
    (other / "ab-report").symlink_to(victim.parent, target_is_directory=True)
    code, out, err = _report([str(folder), str(other)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"report: {other / 'ab-report'}: the output folder is a symbolic link")
    assert sorted(os.listdir(victim.parent)) == ["notes.txt"]
    # Once the links are gone, the page is written.
    (folder / "report" / "report.html").unlink()
    code, out, _ = _report([str(folder)], capsys)
    assert code == 0 and out == f"{folder / 'report' / 'report.html'}\n"
