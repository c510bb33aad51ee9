"""What validation reports: one problem per bad value, and the error that lists them."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.exceptions import PyinfraError


@dataclass(frozen=True)
class Problem:
    """One bad value in one host's data."""

    host: str
    field: str
    value: str
    source: str
    message: str
    allowed: str

    def __str__(self) -> str:
        return (
            f"host {self.host}: {self.field} = {self.value} (from {self.source}): "
            f"{self.message}; allowed: {self.allowed}"
        )


class InventoryError(PyinfraError):
    """Bad inventory data; raised before any host is changed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"invalid inventory, nothing was changed ({len(problems)} problem(s)):"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines))
