"""SGLang release numbers (``0.5.9``, ``0.5.9.post1``) that compare as releases do."""

from __future__ import annotations

import re
from typing import NamedTuple

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


class Version(NamedTuple):
    """A release; ``post`` is -1 for none, so 0.5.9 < 0.5.9.post0 < 0.5.9.post1 < 0.5.10."""

    major: int
    minor: int
    patch: int
    post: int = -1

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return base if self.post < 0 else f"{base}.post{self.post}"


def parse_version(text: str) -> Version:
    """``"0.5.9.post1"`` -> Version(0, 5, 9, 1); ValueError for anything else."""
    match = _RELEASE.match(str(text).strip())
    if not match:
        raise ValueError(f"not a release number: {text!r} (expected e.g. 0.5.23 or 0.5.9.post1)")
    major, minor, patch, post = match.groups()
    return Version(int(major), int(minor), int(patch), int(post) if post is not None else -1)
