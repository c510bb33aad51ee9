"""Where the project's non-Python files live, in a checkout and in an installed wheel."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    return next((path for path in candidates if path.is_dir()), candidates[-1])


# A wheel carries templates/ inside the package; a checkout has it at the repository root.
TEMPLATES = _first_existing(_PACKAGE / "templates", _PACKAGE.parent / "templates")


def template(name: str) -> str:
    return str(TEMPLATES / name)
