"""The model of pyinfra_sglang/data/sglang_flags.toml."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from pyinfra_sglang.data_models.base import DataModel, Release, optional_version
from pyinfra_sglang.versions import Version, parse_version


class FlagSpelling(DataModel):
    flag: str
    since: Release | None = None
    until: Release | None = None

    def exists_in(self, version: Version) -> bool:
        since, until = optional_version(self.since), optional_version(self.until)
        return (since is None or since <= version) and (until is None or version < until)

    def describe(self) -> str:
        since = f"from {parse_version(self.since)}" if self.since else "in every known release"
        until = f" until {parse_version(self.until)} (excluded)" if self.until else ""
        return f"{self.flag} {since}{until}"


class Flag(DataModel):
    """One intent (a server setting) and how each SGLang release spells it."""

    intent: str
    kind: Literal["value", "switch"]
    spellings: tuple[FlagSpelling, ...]

    def flag_in(self, version: Version) -> str | None:
        """The newest spelling that exists in ``version``; None where none does."""
        present = [s for s in self.spellings if s.exists_in(version)]
        if not present:
            return None
        return max(present, key=lambda s: optional_version(s.since) or Version(0, 0, 0)).flag


class FlagVersions(DataModel):
    oldest_read: Release
    newest_read: Release
    router_pins_read: Release


class DpAttention(DataModel):
    switch_with: str


class Mtp(DataModel):
    algorithm: str
    eagle_topk: int


class SglangFlags(DataModel):
    versions: FlagVersions
    flag: tuple[Flag, ...]
    dp_attention: DpAttention
    mtp: Mtp

    @model_validator(mode="after")
    def _one_entry_per_intent(self) -> SglangFlags:
        intents = [f.intent for f in self.flag]
        duplicates = sorted({i for i in intents if intents.count(i) > 1})
        if duplicates:
            raise ValueError(f"intents listed twice: {', '.join(duplicates)}")
        return self
