"""The router unit's smg command line, parsed by each pinned smg release's own parser.

For every smg release data/python.toml [router] pins, a cached venv holds the real
``smg==V`` from PyPI (with its dependencies: ``smg.router_args`` imports the Rust extension
``smg.smg_rs``, which ships in the wheel). A subprocess on that venv's python does what
``smg = smg.cli:main`` does before it starts the gateway: ``create_parser().parse_known_args``
splits off the ``launch`` subcommand, ``smg.launch_router.parse_router_args`` parses the rest
into RouterArgs; it prints the fields this project sets, and the test compares them with what
was rendered. With the API key the command line is the launcher's (``python -c``): the probe
runs the launcher's own ``sys.argv`` edit, with a made-up key in its variable, and stops at
the parse. A flag the release does not know exits 2 with argparse's message, named here.

The first run builds the venvs (~60 MB each, under ``~/.cache/pyinfra-sglang/sglang-compat``
or ``$PYINFRA_SGLANG_TEST_CACHE``); a release that cannot be installed here (PyPI out of
reach) is skipped with pip's reason. ``-m "not compat"`` leaves these tests out.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.serving.render import RouterSpec, router_exec, router_launcher
from tests.compat.sglang_env import EnvUnavailable, _build_once, _pip, compat_dir, env_failed

pytestmark = pytest.mark.compat

RECIPE_VERSION = 1
PIP_TIMEOUT_S = 600
KEY = "sk-compat-smg-key"
SMG_RELEASES = sorted(
    {pin.router for pin in data.python().router.pins if pin.package == "smg"},
    key=lambda v: tuple(int(p) for p in v.split(".")),
)

# Runs in the smg venv: argv after the program, as the unit gives it; prints the fields.
PROBE = r"""
import json, sys
from smg.cli import create_parser
from smg.launch_router import parse_router_args
argv = sys.argv[1:]
args, unknown = create_parser().parse_known_args(argv)
assert args.command == "launch", args.command
parsed = parse_router_args(unknown)
print(json.dumps({name: getattr(parsed, name, None) for name in (
    "worker_urls", "policy", "host", "port", "prometheus_host", "prometheus_port",
    "shutdown_grace_period_secs", "api_key")}))
"""


def smg_env(version: str) -> Path:
    venv = compat_dir() / f"smg-{version}"
    recipe = {"recipe_version": RECIPE_VERSION, "smg": version}

    def build(venv: Path, log: Path) -> None:
        _pip(venv, [f"smg=={version}"], log, f"pip install smg=={version}")

    _build_once(venv, recipe, build)
    return venv


def spec(api_key: str | None, release: str) -> RouterSpec:
    return RouterSpec(
        worker_urls=("http://10.0.0.1:30000", "http://[fd00::2]:30000"),
        host="0.0.0.0",
        port=8000,
        metrics_host="127.0.0.1",
        metrics_port=29001,
        venv_path="/opt/sglang/venvs/x",
        api_key=api_key,
        package="smg",
        release=release,
    )


def probe(venv: Path, argv: list[str], env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd="/",
    )
    if done.returncode != 0:
        pytest.fail(f"smg's parser refused {argv}: {done.stderr.strip()[-800:]}", pytrace=False)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=SMG_RELEASES)
def smg(request) -> tuple[str, Path]:
    try:
        return request.param, smg_env(request.param)
    except EnvUnavailable as error:
        env_failed(error)


def expected(release: str, api_key: str | None) -> dict:
    service = data.sglang_service().router
    return {
        "worker_urls": ["http://10.0.0.1:30000", "http://[fd00::2]:30000"],
        "policy": "cache_aware",
        "host": "0.0.0.0",
        "port": 8000,
        "prometheus_host": "127.0.0.1",
        "prometheus_port": 29001,
        "shutdown_grace_period_secs": service.shutdown_grace_s,
        "api_key": api_key,
    }


def test_pins_name_smg_releases():
    assert SMG_RELEASES and SMG_RELEASES[-1] == "1.13.0"


def test_console_script_command_line_parses(smg):
    release, venv = smg
    argv = router_exec(spec(None, release))
    assert argv[0].endswith("/bin/smg") and argv[1] == "launch"
    # The unit runs the console script `smg`: smg.cli:main in the real wheel's entry points.
    entry_points = next(venv.glob("lib/python*/site-packages/smg-*.dist-info/entry_points.txt"))
    assert "smg=smg.cli:main" in entry_points.read_text().replace(" ", "").splitlines()
    assert probe(venv, argv[1:]) == expected(release, None)


def test_launcher_command_line_parses_with_the_key_from_the_environment(smg):
    release, venv = smg
    argv = router_exec(spec("sk-x", release))
    assert argv[1:3] == ["-c", router_launcher("smg")] and KEY not in argv
    # The launcher's own edit of sys.argv (the key from its variable), then the probe.
    variable = data.sglang_service().router.api_key_variable
    edit = router_launcher("smg").split("; runpy.run_module")[0]
    script = f"{edit}\n{PROBE}"
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, *argv[3:]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, variable: KEY},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-800:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected(release, KEY)


def test_launcher_runs_smg_main_as_python_m_does(smg):
    """runpy.run_module("smg") is `python -m smg`: smg/__main__.py calls smg.cli.main()."""
    _, venv = smg
    main = next(venv.glob("lib/python*/site-packages/smg/__main__.py")).read_text()
    assert "from smg.cli import main" in main and "main()" in main
