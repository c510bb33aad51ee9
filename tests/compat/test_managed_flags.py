"""The flags ``extra_args`` may not set, checked against each release's own parser.

pyinfra_sglang.serving.profiles refuses, in a profile's ``extra_args``, every flag it renders itself
(data/sglang_flags.toml), the secret flags and the aliases SGLang gives them. Real parsers
(cached venvs of tests/compat/sglang_env.py) check that list: every option string of a
managed flag's action is managed (an alias not listed would slip through), and no option
that is not managed is a prefix of a managed one (the prefix rule would refuse a real flag).
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from pyinfra_sglang.serving.extra_args import (
    SECRET_SERVER_FLAGS,
    managed_flag_in,
    managed_server_flags,
)
from tests.compat.sglang_env import EnvUnavailable, env_failed, sglang_env

pytestmark = pytest.mark.compat

HERE = Path(__file__).parent
VERSIONS: list[str] = tomllib.loads((HERE / "sglang_versions.toml").read_text())["versions"]

# Runs in the release's venv: the parser as prepare_server_args builds it; every option
# string, and the option strings sharing an action with each managed flag.
PROBE = """
import argparse, io, json, sys
from contextlib import redirect_stderr, redirect_stdout
from sglang.srt.server_args import ServerArgs

managed = json.loads(sys.argv[1])
parser = argparse.ArgumentParser()
with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
    ServerArgs.add_cli_args(parser)
actions = parser._option_string_actions
out = {
    "options": sorted(actions),
    "aliases": {flag: list(actions[flag].option_strings) for flag in managed if flag in actions},
}
with open(sys.argv[2], "w") as handle:
    json.dump(out, handle)
"""


@pytest.fixture(scope="module", params=VERSIONS)
def real_parser(request, tmp_path_factory) -> dict:
    version = request.param
    try:
        env = sglang_env(version)
    except EnvUnavailable as error:
        env_failed(error)
    result = tmp_path_factory.mktemp(f"managed-{version}") / "result.json"
    subprocess.run(
        [str(env.python), "-c", PROBE, json.dumps(sorted(managed_server_flags())), str(result)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return {"version": version, **json.loads(result.read_text())}


def test_every_alias_of_a_managed_flag_is_managed(real_parser):
    managed = managed_server_flags()
    for flag, strings in real_parser["aliases"].items():
        missing = set(strings) - managed
        assert not missing, f"SGLang {real_parser['version']}: {flag} also reads {missing}"


def test_secret_flags_exist_and_are_refused(real_parser):
    for flag in SECRET_SERVER_FLAGS:
        assert flag in real_parser["options"], (real_parser["version"], flag)
        assert managed_flag_in(f"{flag}=x") == flag


def test_no_real_flag_is_refused_as_an_abbreviation(real_parser):
    managed = managed_server_flags()
    wrongly = [
        option
        for option in real_parser["options"]
        if option.startswith("--") and option not in managed and managed_flag_in(option)
    ]
    assert wrongly == [], f"SGLang {real_parser['version']}: real flags refused: {wrongly}"
