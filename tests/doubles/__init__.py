"""Test doubles put first on a subprocess's PYTHONPATH (``PYTHONPATH=tests/doubles``) so that
code written for a GPU host runs here; each replays real captures from tests/fixtures/."""
