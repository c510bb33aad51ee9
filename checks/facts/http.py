"""Facts read over HTTP on the host (curl)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from pyinfra_sglang.parsers.files import (
    parse_last_int,
)


class HttpStatus(FactBase[int | None]):
    """The HTTP status a GET of ``url`` gets from the host itself within 10 s; None when
    nothing answers. (python3: on every host the roles provision.)"""

    def requires_command(self, url: str) -> str:
        return "python3"

    def command(self, url: str) -> str:
        probe = (
            "import sys, urllib.request, urllib.error\n"
            "try:\n"
            "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
            "except urllib.error.HTTPError as error:\n"
            "    print(error.code)\n"
            "except Exception:\n"
            "    print('none')\n"
        )
        return f"python3 -c {shlex.quote(probe)} {shlex.quote(url)}"

    def process(self, output) -> int | None:
        return parse_last_int(output)
