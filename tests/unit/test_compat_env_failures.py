"""A compat venv that cannot be built fails the run, naming the install, unless the package
index itself is out of reach, which is said as the skip's reason (tests/compat/sglang_env.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.compat.sglang_env import EnvUnavailable, env_failed

FAILED = EnvUnavailable(
    "pip install --no-deps sglang==9.9.9 failed (log: /x/build.log): ERROR: No matching "
    "distribution found for sglang==9.9.9",
    "pip install --no-deps sglang==9.9.9",
)


class _Index(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def log_message(self, *args):
        pass


@pytest.fixture
def answering_index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/simple"
    server.shutdown()


def test_a_failed_build_with_the_index_answering_fails(monkeypatch, answering_index):
    monkeypatch.setenv("PIP_INDEX_URL", answering_index)
    with pytest.raises(pytest.fail.Exception) as failed:
        env_failed(FAILED)
    assert "pip install --no-deps sglang==9.9.9 failed, the index answering" in str(failed.value)


def test_an_index_out_of_reach_is_the_reason_given(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on 9
    with pytest.raises(pytest.skip.Exception) as skipped:
        env_failed(FAILED)
    assert "the package index http://127.0.0.1:9/simple cannot be reached" in str(skipped.value)
