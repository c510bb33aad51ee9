"""decode-check prints what a server sent (its model id, its answers, its errors) with every
control character escaped: a hostile server cannot retitle, clear or drive the terminal."""

from __future__ import annotations

import json

import pytest

from pyinfra_sglang.host_programs import decode_client as decode
from tests.unit.test_decode_check import chunk, stub_server

EVIL = "evil\x1b]0;x\x07\x1b[2J"
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))] + ["\u2028", "\u2029"]


def _models(model: str) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps({"data": [{"id": model}]}).encode()


def _no_control_characters(text: str, newlines: bool = False) -> None:
    # The line ends in print's newline (JSON is indented over lines); nothing else may be a
    # control character.
    found = sorted({c for c in text.rstrip("\n") if c in CONTROLS and not (newlines and c == "\n")})
    assert not found, (found, text)


def test_safe_text_escapes_c0_del_c1_and_separators_as_repr_does():
    shown = decode.safe_text("a" + "".join(CONTROLS) + "é b")
    _no_control_characters(shown)
    assert shown.startswith("a\\x00\\x01") and "\\x1b" in shown and "\\t\\n" in shown
    assert "\\x7f\\x80" in shown and "\\x9f" in shown and shown.endswith("\\u2028\\u2029é b")
    assert decode.safe_text(shown) == shown


@pytest.mark.parametrize("json_", [[], ["--json"]], ids=["text", "json"])
def test_a_hostile_model_id_and_answer_reach_the_terminal_escaped(json_, capsys):
    routes = {
        "/v1/models": _models(EVIL),
        "/v1/chat/completions": (
            200,
            "text/event-stream",
            chunk(content=EVIL) + b"data: [DONE]\n\n",
        ),
    }
    with stub_server(routes) as url:
        code = decode.main(["--url", url, "--timeout", "20", *json_])
    out = capsys.readouterr().out
    assert code == 1
    assert "\x1b" not in out and "\x07" not in out
    _no_control_characters(out, newlines=bool(json_))
    if json_:
        result = json.loads(out)
        assert result["model"] == EVIL and result["reason"] == "wrong-answer"
        assert "\x1b" not in result["message"] and "evil\\x1b]0;x\\x07\\x1b[2J" in result["message"]
    else:
        assert out.startswith("FAIL wrong-answer (") and out.count("\n") == 1
        assert f"{url} (evil\\x1b]0;x\\x07\\x1b[2J)" in out  # the model id, shown escaped
        assert "lacks 'Paris'" in out


def test_a_hostile_error_body_reaches_the_terminal_escaped(capsys):
    body = b"boom\x1b[2J\x9b31m\xe2\x80\xa8line\r\nnext"
    routes = {
        "/v1/models": _models(EVIL),
        "/v1/chat/completions": (500, "text/plain", body),
    }
    with stub_server(routes) as url:
        code = decode.main(["--url", url, "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("FAIL http-error (") and "answered 500" in out
    assert "boom\\x1b[2J" in out
    _no_control_characters(out)
