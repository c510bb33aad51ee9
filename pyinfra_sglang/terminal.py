"""Text from elsewhere (a build log, nvidia-smi output, a server's reply) made safe to print:
every control character a terminal may act on (ESC, C1, DEL, carriage return...) shown as
repr() escapes it, so that it cannot move the cursor, recolour, retitle or clear the screen.
Newlines (and tabs) stay, for multi-line text."""

from __future__ import annotations

import json
import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: str) -> str:
    """``text`` with its control characters but newline and tab escaped (ESC as ``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def brief(value: object, width: int = 40) -> str:
    """A value read from a file, as an error message names it: JSON's spelling (a float as
    Python writes it, NaN and Infinity included), cut to ``width`` characters. An integer of
    more digits than str() takes (4300) is named by its size, never converted."""
    if isinstance(value, float):
        text = repr(value)
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):  # not JSON, or an int past str()'s digit limit
            text = "a number of more than 4300 digits" if isinstance(value, int) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
