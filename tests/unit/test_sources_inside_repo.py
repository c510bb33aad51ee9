"""Every source the project cites is inside the repository: docs/sources.md.

A user's clone has only the repository, so no tracked file may cite a file outside it (a
shared notes file, a sibling folder) as the source of a fact. Outside tests/fixtures/ nothing
names the sibling folder, its docs or the old shared notes file (OUTSIDE below); docs/testing.md
alone may name the device kit (DEVICE_KIT), as a tool its real-engine run uses, not as a
source. The fixtures' provenance READMEs cite docs/sources.md for facts, never the shared
notes file.

Every reference to docs/sources.md names a section it has: a link's anchor
(``sources.md#gpu-pcie-nvlink-and-nccl-measurements``) or the written form
("docs/sources.md, " and the section's heading, wrapped over comment lines or not).

"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Built from parts, so that this file does not cite what it forbids.
NOTES_FILE = "FACTS" + ".md"
OUTSIDE = ("../" + "shared", "shared/" + "docs", NOTES_FILE)
# The one allowed mention outside tests/fixtures: the device kit, in docs/testing.md.
DEVICE_KIT = "../" + "shared/sglang-device-kit"
KIT_ALLOWED_IN = "docs/testing.md"
FIXTURES = "tests/fixtures/"


def tracked_files() -> list[str]:
    """The repository's tracked text files, relative to its root (git ls-files)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git ls-files is not available here (not a git checkout)")
    return sorted(name for name in listed.split("\0") if name)


def read_text(relative: str) -> str | None:
    """The file's text, or None for a binary file or one missing from the work tree."""
    try:
        return (ROOT / relative).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def outside_citations(relative: str, text: str) -> list[str]:
    """``relative:line: pattern`` for each line of ``text`` that names a path outside the
    repository (the device kit in docs/testing.md aside)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        checked = line.replace(DEVICE_KIT, "") if relative == KIT_ALLOWED_IN else line
        found += [f"{relative}:{number}: {pattern}" for pattern in OUTSIDE if pattern in checked]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def sections() -> list[str]:
    """The headings of docs/sources.md (## and below)."""
    return re.findall(r"^#{2,6} +(.+?) *$", SOURCES.read_text(encoding="utf-8"), re.M)


WRITTEN = re.compile(r"docs/sources\.md, ")
ANCHOR = re.compile(r"sources\.md#([\w-]+)")
# A line break inside a citation, with the next line's comment marker or indent.
CONTINUATION = re.compile(r"\s*\n\s*(?:#+|//|\*|>)?\s*")


def written_section(text: str, start: int) -> str:
    """What follows a written reference at ``start``, joined over wrapped comment lines,
    without the quotes a section's name may stand in."""
    return CONTINUATION.sub(" ", text[start : start + 300]).lstrip("\"'“`")


def bad_references(relative: str, text: str, headings: list[str]) -> list[str]:
    """``relative: reference`` for each reference to docs/sources.md naming no section."""
    anchors = {slug(h) for h in headings}
    bad = [
        f"{relative}: sources.md#{m.group(1)}"
        for m in ANCHOR.finditer(text)
        if m.group(1) not in anchors
    ]
    for m in WRITTEN.finditer(text):
        after = written_section(text, m.end())
        if not any(after.startswith(h) for h in headings):
            bad.append(f"{relative}: docs/sources.md, {after[:60]!r}")
    return bad


def test_sources_md_has_sections_with_distinct_anchors():
    headings = sections()
    assert len(headings) >= 10
    slugs = [slug(h) for h in headings]
    assert len(set(slugs)) == len(slugs), slugs
    for expected in (
        "nvidia-driver-packages-and-branches",
        "cuda-toolkit-driver-minimums",
        "flash-attn-build",
        "sglang-releases-read-from-their-wheels",
        "sglang-runtime-behaviour",
        "glm-5-nvfp4-checkpoint",
        "gpu-pcie-nvlink-and-nccl-measurements",
        "published-serving-numbers",
        "what-nvml-readings-mean",
        "package-indexes",
    ):
        assert expected in slugs


def test_no_tracked_file_cites_a_source_outside_the_repository():
    found = []
    for relative in tracked_files():
        if relative.startswith(FIXTURES) or relative == THIS:
            continue
        text = read_text(relative)
        if text is not None:
            found += outside_citations(relative, text)
    assert found == [], "cite docs/sources.md instead:\n" + "\n".join(found)


def test_fixture_readmes_cite_no_shared_notes():
    found = []
    for relative in tracked_files():
        if relative.startswith(FIXTURES) and relative.endswith("README.md"):
            text = read_text(relative) or ""
            found += [
                f"{relative}:{n}"
                for n, line in enumerate(text.splitlines(), 1)
                if NOTES_FILE in line
            ]
    assert found == [], "cite docs/sources.md instead:\n" + "\n".join(found)


def test_every_reference_to_sources_md_names_an_existing_section():
    headings = sections()
    bad = []
    for relative in [*tracked_files(), "docs/sources.md"]:
        if relative == THIS:
            continue
        text = read_text(relative)
        if text is not None:
            bad += bad_references(relative, text, headings)
    assert bad == [], "no such section in docs/sources.md:\n" + "\n".join(sorted(set(bad)))


def test_the_checks_catch_what_they_are_for():
    headings = ["GLM-5-NVFP4 checkpoint", "GPU, PCIe, NVLink and NCCL measurements"]
    assert outside_citations("docs/x.md", f"see ../{'shared'}/docs/{NOTES_FILE}") != []
    assert outside_citations("data/x.toml", f"# ({NOTES_FILE}, December)") != []
    assert outside_citations(KIT_ALLOWED_IN, f"copy {DEVICE_KIT}/ here") == []
    assert outside_citations("docs/roles.md", f"copy {DEVICE_KIT}/ here") != []
    wrapped = "# (docs/sources.md, GPU, PCIe, NVLink and NCCL\n# measurements), else"
    assert bad_references("x.toml", wrapped, headings) == []
    assert bad_references("x.md", "[s](sources.md#glm-5-nvfp4-checkpoint)", headings) == []
    assert bad_references("x.md", "[s](sources.md#no-such-thing)", headings) != []
    assert bad_references("x.toml", '# (docs/sources.md, "GLM-5-NVFP4 checkpoint")', headings) == []
    assert bad_references("x.toml", "# docs/sources.md, Made up section", headings) != []
    assert slug("SGLang releases, read from their wheels") == (
        "sglang-releases-read-from-their-wheels"
    )
