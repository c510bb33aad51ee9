"""Issue 35 N2 and N3: every file the controller writes goes through one safe writer (no
symlink followed, no FIFO opened, written by rename), and the tuner's journal is data that is
checked (caps, values, another search's journal refused with a message, not a traceback).

Each writer is tested with what a planted folder holds: a symbolic link at the file's name
pointing at a file of the user's ("victim", standing in for ~/.ssh/authorized_keys), a FIFO
(a writer or reader that opened it would hang), a folder that is itself a link."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest

from pyinfra_sglang.audit.report import write_report
from pyinfra_sglang.safe_write import OutputFolder, UnsafeOutputError, read_file, write_file
from pyinfra_sglang.served_benchmark.results import new_run_folder, scrub_secrets, write_json
from pyinfra_sglang.tuning.journal import (
    JOURNAL_FILE,
    JournalError,
    append_round,
    header,
    open_journal,
)
from pyinfra_sglang.tuning.judge import Objective
from pyinfra_sglang.tuning.search import Round
from pyinfra_sglang.tuning.space import load_space
from roles.tuner import write_summary

VICTIM_TEXT = "ssh-ed25519 AAAA the user's own key\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim" / "authorized_keys"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


def planted(folder: Path, name: str, victim: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(victim)
    return folder / name


def fifo(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / name)
    return folder / name


# --- the writer itself -----------------------------------------------------------------------


def test_a_file_is_written_by_rename_and_a_plain_file_replaced(tmp_path):
    path = write_file(tmp_path / "out" / "a.json", "one")
    inode = path.stat().st_ino
    write_file(path, b"two")
    assert path.read_text() == "two" and path.stat().st_ino != inode  # a new file, renamed
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]  # no temporary left


def test_a_link_a_fifo_and_a_linked_folder_are_refused(tmp_path, victim):
    link = planted(tmp_path / "out", "a.json", victim)
    with pytest.raises(UnsafeOutputError, match="a symbolic link"):
        write_file(link, "forged")
    pipe = fifo(tmp_path / "out", "b.json")
    with pytest.raises(UnsafeOutputError, match="not a plain file"):
        write_file(pipe, "x")
    with pytest.raises(UnsafeOutputError, match="not a plain file"):
        read_file(pipe)  # refused before it is opened: no hang
    (tmp_path / "linked").symlink_to(victim.parent)
    with pytest.raises(UnsafeOutputError, match="output folder is a symbolic link"):
        write_file(tmp_path / "linked" / "authorized_keys", "forged")
    assert victim.read_text() == VICTIM_TEXT
    assert stat.S_ISFIFO(pipe.lstat().st_mode)


def test_an_append_past_its_cap_is_refused(tmp_path):
    with OutputFolder(tmp_path) as out:
        out.append("j", "12345", limit=8)
        with pytest.raises(UnsafeOutputError, match="would grow past 8 bytes"):
            out.append("j", "6789", limit=8)
    assert (tmp_path / "j").read_text() == "12345"


# --- each writer -----------------------------------------------------------------------------


def test_the_audit_report_writer(tmp_path, victim):
    link = planted(tmp_path / "audit", "gpu-1.json", victim)
    with pytest.raises(UnsafeOutputError):
        write_report(link, {"host": "gpu-1"})
    assert victim.read_text() == VICTIM_TEXT
    written = write_report(tmp_path / "audit" / "gpu-2.json", {"host": "gpu-2"})
    assert json.loads(written.read_text()) == {"host": "gpu-2"}


def test_the_bench_results_writers(tmp_path, victim):
    link = planted(tmp_path / "run", "settings.json", victim)
    with pytest.raises(UnsafeOutputError):
        write_json(link, {"a": 1})
    bench = planted(tmp_path / "run", "bench.jsonl", victim)
    with pytest.raises(UnsafeOutputError):
        scrub_secrets(bench, ("the user's own key",))
    assert victim.read_text() == VICTIM_TEXT


def test_a_run_folder_is_new_the_users_alone_and_never_under_a_linked_host_folder(tmp_path, victim):
    run = new_run_folder(tmp_path / "results", "gpu-1")
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    (tmp_path / "results" / "gpu-2").symlink_to(victim.parent)
    with pytest.raises(UnsafeOutputError, match="host's results folder is a symbolic link"):
        new_run_folder(tmp_path / "results", "gpu-2")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["authorized_keys"]


def test_the_tuners_summary_writer(tmp_path, victim):
    link = planted(tmp_path / "tune-1", "tune.txt", victim)
    with pytest.raises(UnsafeOutputError):
        write_summary(link.parent, Objective(1), {}, "table", "block")
    assert victim.read_text() == VICTIM_TEXT


# --- the journal -----------------------------------------------------------------------------

SPACE = load_space()
START: dict = {}
OBJECTIVE = Objective(1)


def journal(folder: Path, *rounds: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [header(SPACE, START, OBJECTIVE), *rounds]
    (folder / JOURNAL_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def a_round(**fields) -> dict:
    line = {
        "kind": "round",
        "trial": 0,
        "round": 1,
        "settings": {},
        "status": "ok",
        "lines": [{"max_concurrency": 1, "output_throughput": 100.0}],
        "seconds": 12.5,
        "diagnosis": None,
        "error": None,
    }
    return {**line, **fields}


def test_the_journal_writer_and_reader_refuse_a_link_and_a_fifo(tmp_path, victim):
    planted(tmp_path / "a", JOURNAL_FILE, victim)
    with pytest.raises(JournalError, match="symbolic link"):
        open_journal(tmp_path / "a", SPACE, START, OBJECTIVE)
    fifo(tmp_path / "b", JOURNAL_FILE)
    with pytest.raises(JournalError, match="not a plain file"):
        open_journal(tmp_path / "b", SPACE, START, OBJECTIVE)
    journal(tmp_path / "c")
    (tmp_path / "c" / JOURNAL_FILE).unlink()
    (tmp_path / "c" / JOURNAL_FILE).symlink_to(victim)
    with pytest.raises(JournalError, match="cannot be written"):
        append_round(tmp_path / "c", Round(0, 1, {}, "ok", []))
    assert victim.read_text() == VICTIM_TEXT


def test_a_journal_round_trips_and_resumes(tmp_path):
    assert open_journal(tmp_path, SPACE, START, OBJECTIVE) == []
    done = Round(0, 1, {}, "ok", [{"max_concurrency": 1, "output_throughput": 99.5}], 3.0)
    append_round(tmp_path, done)
    assert open_journal(tmp_path, SPACE, START, OBJECTIVE) == [done]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"seconds": math.nan}, "seconds is nan"),
        ({"seconds": -1}, "seconds is -1"),
        ({"lines": [{"max_concurrency": 1, "output_throughput": -5.0}]}, "output_throughput"),
        ({"lines": [{"max_concurrency": 1, "output_throughput": math.inf}]}, "output_throughput"),
        ({"lines": [{"max_concurrency": True}]}, "max_concurrency is True"),
        ({"lines": [{"max_concurrency": 1, "median_ttft_ms": "9"}]}, "not a number"),
        ({"lines": [{"max_concurrency": 1, "evil": 1}]}, "not a result line"),
        ({"lines": "nope"}, "lines is 'nope'"),
        ({"trial": -1}, "trial is -1"),
        ({"trial": "0"}, "trial is '0'"),
        ({"round": 0}, "round is 0"),
        ({"status": "won"}, "status is 'won'"),
        ({"settings": []}, "settings is []"),
        ({"diagnosis": 5}, "diagnosis is 5"),
        ({"kind": "search"}, "not a round line"),
    ],
)
def test_bad_values_in_a_journal_are_refused_naming_the_line(tmp_path, fields, message):
    journal(tmp_path, a_round(), a_round(**fields))
    with pytest.raises(JournalError, match="line 3 is not a round") as raised:
        open_journal(tmp_path, SPACE, START, OBJECTIVE)
    assert message in str(raised.value)


def test_a_journal_over_its_caps_or_malformed_is_refused_not_a_traceback(tmp_path):
    folder = journal(tmp_path / "big")
    with open(folder / JOURNAL_FILE, "a") as file:
        file.write(" " * (4 * 1024 * 1024))
    with pytest.raises(JournalError, match="max_journal_bytes"):
        open_journal(folder, SPACE, START, OBJECTIVE)
    deep = journal(tmp_path / "deep")
    with open(deep / JOURNAL_FILE, "a") as file:
        file.write("[" * 60000 + "]" * 60000 + "\n")
    with pytest.raises(JournalError, match="max_json_depth"):
        open_journal(deep, SPACE, START, OBJECTIVE)
    many = journal(tmp_path / "many", *([a_round()] * 2001))
    with pytest.raises(JournalError, match="max_journal_rounds"):
        open_journal(many, SPACE, START, OBJECTIVE)
    broken = journal(tmp_path / "broken")
    with open(broken / JOURNAL_FILE, "a") as file:
        file.write("{not json\n")
    with pytest.raises(JournalError, match="cannot be read"):
        open_journal(broken, SPACE, START, OBJECTIVE)
    other = journal(tmp_path / "other")
    with pytest.raises(JournalError, match="records another search"):
        open_journal(other, SPACE, {"cuda_graph": True}, OBJECTIVE)


def test_only_the_users_own_journal_in_a_folder_only_it_may_write_is_resumed(tmp_path):
    """Issue 35 N3: forged numbers chose the winner the host was left on. A journal another
    user could have written (writable by others, or its folder by anyone) is refused."""
    assert open_journal(tmp_path / "mine", SPACE, START, OBJECTIVE) == []
    assert stat.S_IMODE((tmp_path / "mine" / JOURNAL_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o700
    append_round(tmp_path / "mine", Round(0, 1, {}, "ok", []))
    assert len(open_journal(tmp_path / "mine", SPACE, START, OBJECTIVE)) == 1
    shared = journal(tmp_path / "shared", a_round())
    (shared / JOURNAL_FILE).chmod(0o666)
    with pytest.raises(JournalError, match="writable by others: refusing to trust it"):
        open_journal(shared, SPACE, START, OBJECTIVE)
    (shared / JOURNAL_FILE).chmod(0o644)
    shared.chmod(0o777)
    with pytest.raises(JournalError, match="writable by its group or every user: refusing"):
        open_journal(shared, SPACE, START, OBJECTIVE)
    # Its group may write it: any member could have planted the journal (issue 46, LOW).
    shared.chmod(0o770)
    with pytest.raises(JournalError, match="writable by its group or every user: refusing"):
        open_journal(shared, SPACE, START, OBJECTIVE)
    shared.chmod(0o750)
    assert len(open_journal(shared, SPACE, START, OBJECTIVE)) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_journal_another_user_owns_is_refused(tmp_path):
    theirs = journal(tmp_path / "theirs", a_round())
    os.chown(theirs / JOURNAL_FILE, 65534, 65534)  # nobody
    with pytest.raises(JournalError, match="owned by another user"):
        open_journal(theirs, SPACE, START, OBJECTIVE)
