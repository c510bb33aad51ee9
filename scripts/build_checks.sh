#!/usr/bin/env bash
# The checks of CI's lint stage (.ci/run) that build or start things rather than test the
# tool's behaviour: the wheel (built from this checkout, installed in a fresh venv, its
# console script run outside the checkout on real captures) and every core module imported
# alone in a fresh interpreter. They are pytest files, tests/build/check_*.py, that
# `uv run pytest` does not collect (their names do not match test_*.py); naming them runs
# them. Extra arguments go to pytest (-x, -k, -v).
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run pytest -q tests/build/check_imports.py tests/build/check_wheel.py "$@"
