"""An hf_endpoint with a mirror's user:password at planning: before, urllib took the login for
part of the host name (the request never reached the mirror) and the error showed it."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from pyinfra_sglang.model_files.model_snapshot import ModelPlanError, hub_snapshot

COMMIT = "c" * 40


@pytest.fixture
def mirror():
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            body = json.dumps({"sha": COMMIT, "siblings": [{"rfilename": "a", "size": 1}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_login_is_sent_as_basic_auth_not_as_a_host_name(mirror):
    port, seen = mirror
    snapshot = hub_snapshot(f"http://deploy:p%40ss@127.0.0.1:{port}", "org/login-m", "main", None)
    assert snapshot.commit == COMMIT
    assert seen == ["Basic ZGVwbG95OnBAc3M="]  # deploy:p@ss
    # With a token, the token is the one Authorization.
    hub_snapshot(f"http://deploy:p%40ss@127.0.0.1:{port}", "org/login-t", "main", "hf_x")
    assert seen[-1] == "Bearer hf_x"


def test_an_unreachable_mirror_is_named_without_its_login():
    with pytest.raises(ModelPlanError) as refused:
        hub_snapshot("http://deploy:s3cret@127.0.0.1:9", "org/m-unreachable", "main", None, 2)
    assert "cannot reach the Hub at http://127.0.0.1:9" in str(refused.value)
    assert "s3cret" not in str(refused.value)
