"""roles.common.template_file: one FileStates read finds a rendered file already there, where
pyinfra's files.template reads three facts; anything else is files.template's own work.
FileStates on this machine's files agrees with pyinfra's File and Sha1File."""

from __future__ import annotations

import hashlib
import os
import pwd

import pytest
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.files import Directory, File, Sha1File
from pyinfra.facts.server import TmpDir

from checks.facts import FileStates
from pyinfra_sglang.parsers.files import parse_file_states
from pyinfra_sglang.paths import template
from roles.common import template_file
from tests.unit.ophelper import run_operation
from tests.unit.test_facts import local_state

SRC = template("cuda-profile.sh.j2")
DEST = "/etc/profile.d/cuda.sh"
ARGS = {
    "src": SRC,
    "dest": DEST,
    "user": "root",
    "group": "root",
    "mode": "644",
    "cuda_version": "12.8",
    "cuda_home": "/usr/local/cuda-12.8",
}


def rendered_sha1() -> str:
    from pyinfra.api.util import get_template

    text = get_template(SRC).render({k: v for k, v in ARGS.items() if k.startswith("cuda_")})
    return hashlib.sha1(text.encode()).hexdigest()


def there(**changes) -> dict:
    found = {"user": "root", "group": "root", "mode": 644, "sha1": rendered_sha1()}
    return {DEST: {**found, **changes}}


def test_a_file_already_there_is_one_read_and_no_command():
    assert run_operation(template_file, {FileStates: there()}, **ARGS) == (
        [],
        [f"file {DEST} is already uploaded"],
    )


@pytest.mark.parametrize(
    "found",
    [
        {DEST: None},
        {},
        there(sha1="0" * 40),
        there(mode=600),
        there(user="nobody"),
        there(group="staff"),
    ],
    ids=["missing", "unread", "content", "mode", "user", "group"],
)
def test_anything_else_is_files_templates_own_work(found):
    # pyinfra's files.template reads its own facts and uploads, chowns, chmods as before.
    facts = {
        FileStates: found,
        File: {"user": "root", "group": "root", "mode": 600},
        Sha1File: "0" * 40,
        Directory: {"mode": 755},
        TmpDir: "/tmp",
    }
    commands, noops = run_operation(template_file, facts, **ARGS)
    assert not noops and any("chmod 644" in c for c in commands)


def test_file_states_agree_with_pyinfras_facts(tmp_path):
    present = tmp_path / "a file"
    present.write_text("hello\n")
    os.chmod(present, 0o640)
    (tmp_path / "link").symlink_to(present)
    paths = (str(present), str(tmp_path / "missing"), str(tmp_path), str(tmp_path / "link"))
    state, host = local_state("/usr/bin:/bin")
    with ctx_state.use(state), ctx_host.use(host):
        states = host.get_fact(FileStates, paths=paths)
        file = host.get_fact(File, path=str(present))
        sha1 = host.get_fact(Sha1File, path=str(present))
    user = pwd.getpwuid(os.getuid()).pw_name
    assert states[str(present)] == {
        "user": file["user"],
        "group": file["group"],
        "mode": file["mode"],
        "sha1": sha1,
    }
    assert file["user"] == user and file["mode"] == 640
    # Missing, a folder, a link: no regular file, so template_file leaves them to pyinfra.
    assert states[paths[1]] is None and states[paths[2]] is None and states[paths[3]] is None


def test_parse_file_states_skips_what_it_cannot_read():
    assert parse_file_states(["/a\t-", "/b\troot root 644\tshort", "junk"]) == {"/a": None}
