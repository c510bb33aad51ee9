"""Facts of files and folders: digests, owners and modes, records, free space, the model
snapshot, the Hub cache, the transfer folder."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.access.transfer_folder import (
    FolderState,
    folder_state_command,
    parse_folder_state,
)
from pyinfra_sglang.model_files.cache_dir import CacheDirState as CacheDirStateValue
from pyinfra_sglang.model_files.cache_dir import parse_state
from pyinfra_sglang.parsers.files import (
    parse_counts,
    parse_file_states,
    parse_first_line,
    parse_last_int,
    parse_sized_files,
)
from pyinfra_sglang.parsers.system import (
    parse_file_digests,
    parse_json_record,
    parse_state_file,
)


class SnapshotFiles(FactBase[dict[str, int]]):
    """The files of a Hub cache snapshot folder and their sizes ({path: bytes}, symlinks
    followed to their blobs); {} when the folder does not exist. Sizes only: a complete
    400 GB snapshot is checked without reading it."""

    @staticmethod
    def default() -> dict[str, int]:
        return {}

    def command(self, folder: str) -> str:
        quoted = shlex.quote(folder)
        return f"[ -d {quoted} ] && find -L {quoted} -type f -printf '%s\\t%P\\n' || true"

    def process(self, output) -> dict[str, int]:
        return parse_sized_files(output)


class SnapshotDamage(FactBase[dict[str, int]]):
    """What a cut-off download leaves in a Hub cache model folder: snapshot links whose blob
    is missing, and ``.incomplete`` blobs ({"broken": N, "incomplete": M})."""

    @staticmethod
    def default() -> dict[str, int]:
        return {}

    def command(self, model_folder: str) -> str:
        q = shlex.quote(model_folder)
        return (
            f"echo broken $(find {q}/snapshots -xtype l 2>/dev/null | wc -l); "
            f"echo incomplete $(find {q}/blobs -name '*.incomplete' 2>/dev/null | wc -l)"
        )

    def process(self, output) -> dict[str, int]:
        return parse_counts(output)


class FirstLine(FactBase[str | None]):
    """The first line of the file at ``path`` (a Hub cache ref holds one commit); None when
    there is no such file."""

    def command(self, path: str) -> str:
        return f"head -n 1 {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output) -> str | None:
        return parse_first_line(output)


class JsonRecord(FactBase[dict | None]):
    """The JSON object in the file at ``path`` (flash-attn's build record); None when there is
    no such file or it holds no JSON object (see parse_json_record)."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output) -> dict | None:
        return parse_json_record(output)


class ModelConfigJson(FactBase[dict | None]):
    """A model folder's config.json on the host, at most ``limit`` bytes of it, as a JSON
    object; None when there is none, it is larger, or it holds no JSON object."""

    def command(self, path: str, limit: int) -> str:
        return f"head -c {int(limit) + 1} {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output) -> dict | None:
        return parse_json_record(output)


class StateFile(FactBase[dict]):
    """A program's JSON state file at ``path``: {"present", "record"} (parse_state_file), so
    a file that is there but holds no JSON object is told from one never written."""

    @staticmethod
    def default() -> dict:
        # No output at all (no file): pyinfra gives the default, not process("").
        return {"present": False, "record": None}

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        # Not UTF-8: nothing after "present" (the record is then unreadable, not garbled).
        return (
            f"if [ -e {q} ]; then echo present; "
            f"if iconv -f UTF-8 -t UTF-8 {q} >/dev/null 2>&1; then head -c 1048576 {q}; fi; "
            "fi; true"
        )

    def process(self, output) -> dict:
        return parse_state_file(output)


class FreeBytes(FactBase[int | None]):
    """Free bytes of the filesystem that holds ``path`` (or would: its nearest existing
    parent), for an unprivileged writer as df reports them."""

    def command(self, path: str) -> str:
        return (
            f'p={shlex.quote(path)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
            "df -P -B1 \"$p\" | awk 'NR == 2 {print $4}'"
        )

    def process(self, output) -> int | None:
        return parse_last_int(output)


class CacheDirState(FactBase[CacheDirStateValue]):
    """What is at the Hub cache's ``path`` (pyinfra_sglang/model_files/cache_dir.py judges
    it): its deepest existing ancestor and where that resolves (a symlinked component shows
    as a difference), the folder's owner, kind and emptiness, the first path below it not
    owned by ``user`` (find stops at the first; ``prune``, a folder below ``path`` judged on
    its own, is left out), and the package dpkg says owns it."""

    def command(self, path: str, user: str, prune: str | None = None) -> str:
        p, u = shlex.quote(path), shlex.quote(user)
        skip = f"-path {shlex.quote(prune)} -prune -o " if prune else ""
        return (
            f'p={p}; d=$p; echo "path=$p"; '
            'while [ ! -e "$d" ] && [ ! -L "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done; '
            'echo "deepest=$d"; echo "resolved=$(readlink -f -- "$d")"; '
            'if [ -e "$p" ] || [ -L "$p" ]; then '
            "stat -c 'owner=%U' -- \"$p\"; stat -c 'kind=%F' -- \"$p\"; "
            'if [ -d "$p" ] && [ ! -L "$p" ]; then '
            '[ -z "$(ls -A -- "$p")" ] && echo empty=1; '
            f'echo "foreign=$(find "$p" {skip}! -user {u} -print -quit 2>/dev/null)"; fi; fi; '
            'echo "package=$(dpkg-query -S -- "$p" 2>/dev/null | head -n 1 | cut -d: -f1)"'
        )

    def process(self, output) -> CacheDirStateValue:
        return parse_state(output)


class CacheDirStates(FactBase[list[CacheDirStateValue]]):
    """CacheDirState of each of ``paths`` in one round trip, in their order; a path below
    another given one is left out of that one's ownership scan (it is judged on its own)."""

    def command(self, paths: tuple[str, ...], user: str) -> str:
        single = CacheDirState()
        return "; ".join(
            single.command(path, user, next((p for p in paths if p.startswith(path + "/")), None))
            for path in paths
        )

    def process(self, output) -> list[CacheDirStateValue]:
        blocks: list[list[str]] = []
        for line in output:
            if line.startswith("path="):
                blocks.append([])
            if blocks:
                blocks[-1].append(line)
        return [parse_state(block) for block in blocks]


class FileDigests(FactBase[dict[str, str | None]]):
    """sha256 of each of ``paths`` ({path: digest, or None when missing}): lets an operation
    compare rendered content, secrets included, without reading it back."""

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def command(self, paths: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f'for p in {quoted}; do if [ -f "$p" ]; then sha256sum "$p"; else echo "- $p"; fi; done'
        )

    def process(self, output) -> dict[str, str | None]:
        return parse_file_digests(output)


class FileStates(FactBase[dict[str, dict | None]]):
    """Owner, group, octal mode and sha1 of each of ``paths`` that is a regular file (None for
    one that is not: missing, a folder, a link), in one command: what pyinfra's files.put
    reads with three facts a file (File, Sha1File, the parent's Directory) to find a file
    already uploaded (see parse_file_states)."""

    @staticmethod
    def default() -> dict[str, dict | None]:
        return {}

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f"for p in {quoted}; do "
            'if [ -f "$p" ] && [ ! -L "$p" ]; then '
            's=$(sha1sum < "$p") && '
            'printf \'%s\\t%s\\t%s\\n\' "$p" "$(stat -c \'%U %G %a\' -- "$p")" "${s%% *}"; '
            "else printf '%s\\t-\\n' \"$p\"; fi; done; true"
        )

    def process(self, output) -> dict[str, dict | None]:
        return parse_file_states(output)


class PrivateFolder(FactBase[FolderState]):
    """The state of a folder as the user the fact runs as (``path`` relative: to that user's
    home); read unelevated, it is the transfer folder of pyinfra_sglang.access.transfer_folder."""

    def command(self, path: str) -> str:
        return folder_state_command(path)

    def process(self, output) -> FolderState:
        return parse_folder_state(output)
