"""What a check reports: findings with a level, a stable code and a message.

Codes are kebab-case strings users grep and alert on; renaming one is a breaking change.
Messages say what was expected, what was found and what to do.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

Level = Literal["ok", "warn", "fail"]
LEVELS: tuple[Level, ...] = ("ok", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    message: str
    gpu: int | None = None
    # The numbers the finding rests on, for reports and JSON (never secrets).
    evidence: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        data = asdict(self)
        if self.gpu is None:
            del data["gpu"]
        if not self.evidence:
            del data["evidence"]
        return data


def worst_level(findings: list[Finding]) -> Level:
    """The most severe level among findings ("ok" when there are none)."""
    return max((f.level for f in findings), key=LEVELS.index, default="ok")
