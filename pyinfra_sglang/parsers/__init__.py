"""Parsers of real command output: pure functions, no pyinfra host access."""
