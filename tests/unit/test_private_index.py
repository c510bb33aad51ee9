"""The tests' package index served as a private mirror: HTTP basic auth on every request
(tests/hosts/aptrepo.serve with credentials), as an index URL with userinfo needs."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import pytest

from tests.hosts import aptrepo


def get(url: str, user_password: str | None = None) -> int:
    request = urllib.request.Request(url)
    if user_password:
        token = base64.b64encode(user_password.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def root(tmp_path):
    (tmp_path / "simple").mkdir()
    (tmp_path / "simple" / "index.html").write_text("<html></html>\n")
    return tmp_path


def test_a_private_index_answers_only_requests_with_its_credentials(root):
    with aptrepo.serve(root, credentials=("deploy", "s3cret")) as url:
        assert get(f"{url}/simple/") == 401
        assert get(f"{url}/simple/", "deploy:wrong") == 401
        assert get(f"{url}/simple/", "deploy:s3cret") == 200
        assert get(f"{url}/missing/", "deploy:s3cret") == 404


def test_an_open_index_answers_everyone(root):
    with aptrepo.serve(root) as url:
        assert get(f"{url}/simple/") == 200
