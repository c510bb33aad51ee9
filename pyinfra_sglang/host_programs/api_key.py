"""Read the SGLang server's API key on a host: from a file holding the key alone, or from the
server's YAML config file. Standard library only, Python 3.9+; shipped to hosts, where
``python3 api_key.py FILE`` writes the key to stdout for a shell to put into an environment
variable (never onto a command line), and exits 2 when the file cannot be read (the message
never quotes the file's text)."""

from __future__ import annotations

import json
import re
import sys

_API_KEY_LINE = re.compile(r"^api[-_]key[ \t]*:(.*)$")
_YAML_KEY_LINE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*[ \t]*:([ \t]|$)")


def read_api_key(path: str) -> str | None:
    """The API key in ``path``: a file holding the key alone, or an SGLang YAML config file
    (as pyinfra-sglang writes /etc/sglang/sglang.yaml) with an ``api-key:`` line, its value
    plain, 'single-' or "double-quoted" (JSON escapes). None when a config file sets no key.
    Errors never quote the file's text."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    is_config = any(
        line.startswith("#") or line == "---" or _YAML_KEY_LINE.match(line) for line in lines
    )
    if not is_config:
        return text.strip() or None
    for line in lines:
        match = _API_KEY_LINE.match(line)
        if match:
            return _yaml_scalar(match.group(1).strip(), path)
    return None


def _yaml_scalar(value: str, path: str) -> str | None:
    if value.startswith('"'):
        # Up to the first unescaped quote; render.py writes JSON strings, a YAML subset.
        end = 1
        while end < len(value):
            if value[end] == "\\":
                end += 2
                continue
            if value[end] == '"':
                try:
                    return json.loads(value[: end + 1])
                except ValueError:
                    break
            end += 1
        raise ValueError(f"{path}: the api-key value's double quotes are not closed or valid")
    if value.startswith("'"):
        match = re.match(r"'((?:[^']|'')*)'", value)
        if not match:
            raise ValueError(f"{path}: the api-key value's single quotes are not closed")
        return match.group(1).replace("''", "'")
    value = re.split(r"[ \t]#", value, maxsplit=1)[0].strip()
    return None if value in ("", "~", "null", "Null", "NULL") else value


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: api_key.py FILE", file=sys.stderr)
        return 2
    try:
        key = read_api_key(argv[0])
    except (OSError, ValueError) as error:
        print(f"cannot read the API key: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(key or "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
