"""Values that reach a shell are quoted: inventory values (venv_path, index URLs, the API key
file), paths read from hosts (apt source files, the kernel's headers package) and data.

Each hostile value below passed the inventory's validation when the finding was made
(venv_path: "/" then no whitespace; index URLs: any http(s) URL); the quoting holds whatever
the validation lets through. Two kinds of proof:

- the command, split as a shell splits words and operators, holds the value as one word;
- the command, run by /bin/sh, never runs the program ``injected`` the value names (it would
  create a marker file), and the tool it calls receives the value as one argument.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State, StringCommand
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.hardware import Cpus

from checks import audit
from checks.facts import (
    AptSourceEntries,
    KernelHeaders,
    MemoryInfo,
    NvidiaGpus,
    PythonPackages,
    PythonVersion,
    Virtualization,
)
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.parsers.system import parse_json_record
from pyinfra_sglang.python_env.flash_attn_build_plan import built_archs
from pyinfra_sglang.served_benchmark.settings import KEY_UNREADABLE, bench_script, bench_settings
from roles import flash_attn, python_env
from roles.base import kernel_headers
from roles.nvidia_repo import apt_components
from tests.unit.ophelper import transient_unit_script

# Shell payloads the inventory's validation lets through.
HOSTILE_VENVS = [
    "/opt/v;injected${IFS}x;#",
    "/opt/v$(injected)",
    "/opt/v`injected`",
    "/opt/v'$(injected)'",
    '/opt/v"$(injected)"',
]
HOSTILE_INDEXES = [
    "https://mirror/simple?x=$(injected${IFS}y)",
    "https://mirror/simple?x=`injected`",
    "https://mirror/simple?x=';injected;'",
    "https://mirror/simple?a=1|injected",
]
STANDARD_PATH = "/usr/local/bin:/usr/bin:/bin"


def words(command: str) -> list[str]:
    """``command`` split as the shell splits it into words and operators (; & | ( ) < >)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def yielded(op, facts: dict, **kwargs) -> list:
    """The command objects ``op`` yields on a host with ``facts`` (executing)."""
    inventory = Inventory((["quoting-test-host"], {}))
    state = State(inventory=inventory, config=Config())
    state.is_executing = True
    host = inventory.get_host("quoting-test-host")
    with ctx_state.use(state), ctx_host.use(host):
        with (
            patch.object(host, "get_fact", side_effect=lambda cls, *a, **k: facts[cls]),
            patch.object(host, "noop"),
        ):
            return list(op._inner(**kwargs))


def shell_commands(commands: list) -> list[str]:
    """The shell commands among ``commands``, as the host's shell gets them (unmasked)."""
    return [
        c if isinstance(c, str) else c.get_raw_value()
        for c in commands
        if isinstance(c, str | StringCommand)
    ]


@dataclass
class Sandbox:
    """A folder with ``bin/injected`` (creates ``marker``) and ``bin/tool`` (records its
    arguments to ``record``, exits with the number in ``tool-rc`` if there is one)."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def marker(self) -> Path:
        return self.root / "INJECTED"

    @property
    def record(self) -> Path:
        return self.root / "argv"

    @property
    def tool(self) -> str:
        return str(self.bin / "tool")

    def run(self, command: str, path: str = "", shell: str = "/bin/sh"):
        env = {"PATH": f"{self.bin}:{path}" if path else str(self.bin), "HOME": str(self.root)}
        return subprocess.run(
            [shell, "-c", command],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def argv(self) -> list[str]:
        return self.record.read_text().split("\0")[:-1]


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    box = Sandbox(tmp_path)
    box.bin.mkdir()
    # Shell builtins only: they work whatever PATH the command runs with.
    (box.bin / "injected").write_text(f"#!/bin/sh\n: > {box.marker}\n")
    (box.bin / "tool").write_text(
        "#!/bin/sh\n"
        f'for arg in "$@"; do printf \'%s\\0\' "$arg"; done > {box.record}\n'
        f'[ -e {tmp_path}/tool-rc ] && read rc < {tmp_path}/tool-rc && exit "$rc"\n'
        "exit 0\n"
    )
    for program in ("injected", "tool"):
        (box.bin / program).chmod(0o755)
    return box


# -- the Python roles -----------------------------------------------------------------------


@pytest.mark.parametrize("venv", HOSTILE_VENVS)
@pytest.mark.parametrize("index", HOSTILE_INDEXES)
def test_venv_packages_passes_venv_and_index_as_one_argument_each(sandbox, venv, index):
    with patch.object(python_env, "uv_path", return_value=sandbox.tool):
        commands = yielded(
            python_env.venv_packages,
            {PythonPackages: {}},
            venv=venv,
            requirements={"sglang": "0.5.23"},
            index_url=index,
            extra_index_url=index,
        )
    [command] = shell_commands(commands)
    assert f"{venv}/bin/python" in words(command) and index in words(command)
    result = sandbox.run(command, STANDARD_PATH)
    assert result.returncode == 0, result.stderr
    assert not sandbox.marker.exists()
    assert sandbox.argv() == [
        "pip",
        "install",
        "--python",
        f"{venv}/bin/python",
        "--index-url",
        index,
        "--extra-index-url",
        index,
        "sglang==0.5.23",
    ]


GB = 1024**2  # kB
BUILD_FACTS = {
    PythonPackages: {},
    NvidiaGpus: [{"index": "0", "name": "NVIDIA H200", "compute_cap": "9.0"}],
    Cpus: 16,
    MemoryInfo: {"total_kb": 70 * GB, "available_kb": 64 * GB},
}


# The venv's python as the build runs it: records each call's arguments (a line each),
# lays a wheel into --wheel-dir as pip wheel does, and exits with the number in tool-rc.
STANDIN_PYTHON = """#!/bin/sh
for arg in "$@"; do printf '%s\\0' "$arg"; done >> {record}
printf '\\n' >> {record}
previous=
for arg in "$@"; do
    [ "$previous" = --wheel-dir ] && printf wheel > "$arg/{wheel}"
    previous=$arg
done
[ -e {root}/tool-rc ] && read rc < {root}/tool-rc && exit "$rc"
exit 0
"""


def build_script(sandbox: Sandbox, venv: str, index: str, python: str | None = None) -> str:
    """The build unit's script for ``venv`` and ``index``, its logs, record and wheel in the
    sandbox; ``python``: the program that stands for the venv's python."""
    logs = (str(sandbox.root / "logs" / "build.log"), str(sandbox.root / "logs" / "build.json"))
    wheels = str(sandbox.root / "wheels" / "flash-attn-2.8.3")
    with (
        patch.object(flash_attn, "build_log_paths", return_value=logs),
        patch.object(flash_attn, "wheel_folder", return_value=wheels),
        patch.object(flash_attn, "venv_python", side_effect=lambda v: python or f"{v}/bin/python"),
    ):
        commands = yielded(
            flash_attn.flash_attn_built,
            BUILD_FACTS,
            venv=venv,
            version="2.8.3",
            archs_override=None,
            memory_fraction=0.75,
            cuda_home="/usr/local/cuda-13.1",
            index_url=index,
        )
    # The build runs in a transient unit (systemd-run ... /bin/sh -c SCRIPT): its script.
    [start] = shell_commands(commands)
    return transient_unit_script(start)


def build_command(sandbox: Sandbox, venv: str, index: str) -> str:
    """The script, run by the stand-in python (the venv's own is not there to run)."""
    python = sandbox.bin / "python"
    wheel = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
    python.write_text(STANDIN_PYTHON.format(record=sandbox.record, root=sandbox.root, wheel=wheel))
    python.chmod(0o755)
    script = build_script(sandbox, venv, index, str(python))
    return f"mkdir -p {shlex.quote(str(sandbox.root / 'logs'))} && {script}"


def calls(sandbox: Sandbox) -> list[list[str]]:
    return [line.split("\0")[:-1] for line in sandbox.record.read_text().splitlines()]


@pytest.mark.parametrize("venv", HOSTILE_VENVS)
@pytest.mark.parametrize("index", HOSTILE_INDEXES)
def test_flash_attn_build_passes_venv_and_index_as_one_argument_each(sandbox, venv, index):
    script = build_script(sandbox, venv, index)
    assert f"{venv}/bin/python" in words(script)
    # The script is read as systemd hands it to the shell ("$$" to "$", ${NAME} to nothing):
    # a venv or index holding ${IFS} still arrives whole.
    command = build_command(sandbox, venv, index)
    assert index in words(command)
    result = sandbox.run(command, STANDARD_PATH)
    assert result.returncode == 0, result.stderr
    assert not sandbox.marker.exists()
    pip = ["-m", "pip"]
    wheels = str(sandbox.root / "wheels" / "flash-attn-2.8.3")
    staged = f"{wheels}.new/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
    install = [*pip, "install", "--disable-pip-version-check", "--no-cache-dir"]
    assert calls(sandbox) == [
        [
            *pip,
            "wheel",
            "-v",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--wheel-dir",
            f"{wheels}.new",
            "--index-url",
            index,
            "flash-attn==2.8.3",
        ],
        [*install, "--index-url", index, "--no-deps", "--force-reinstall", staged],
        [*install, "--index-url", index, staged],
    ]
    # The record is JSON whatever the values, and names the log and the kept wheel.
    record = json.loads((sandbox.root / "logs" / "build.json").read_text())
    assert record["version"] == "2.8.3" and record["seconds"] >= 0
    assert record["log"] == str(sandbox.root / "logs" / "build.log")
    assert record["env"]["FLASH_ATTN_CUDA_ARCHS"] == "90"
    kept = f"{wheels}/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
    assert record["wheel"] == kept and Path(kept).read_bytes() == b"wheel"
    assert record["sha256"] == hashlib.sha256(b"wheel").hexdigest()
    assert not Path(f"{wheels}.new").exists()
    # What it was built for, read back by the parser the role and the audit use.
    assert record["archs"] == ["90"]
    lines = (sandbox.root / "logs" / "build.json").read_text().splitlines()
    assert built_archs(parse_json_record(lines)) == ("90",)


def test_failed_flash_attn_build_names_its_log_and_shows_its_tail(sandbox):
    (sandbox.root / "tool-rc").write_text("3\n")
    command = build_command(sandbox, "/opt/sglang/venv", "https://pypi.org/simple")
    result = sandbox.run(command, STANDARD_PATH)
    # The unit's script leaves the build's exit status for the controller, which shows the
    # log's tail (test_python_operations.py), and writes no record.
    assert result.returncode == 0, result.stderr
    assert (sandbox.root / "logs" / "build.status").read_text() == "3\n"
    assert (sandbox.root / "logs" / "build.log").exists()
    assert not (sandbox.root / "logs" / "build.json").exists()


@pytest.mark.parametrize("index", HOSTILE_INDEXES)
def test_uv_installed_passes_the_index_as_one_argument(sandbox, index):
    prefix = sandbox.root / "uv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "pip").symlink_to(sandbox.tool)
    with patch.object(python_env, "uv_prefix", return_value=str(prefix)):
        commands = shell_commands(
            yielded(
                python_env.uv_installed, {PythonPackages: {}}, version="0.13.9", index_url=index
            )
        )
    for command in commands:
        result = sandbox.run(command, STANDARD_PATH)
        assert result.returncode == 0, result.stderr
    assert not sandbox.marker.exists()
    assert index in words(commands[-1])
    assert sandbox.argv() == [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--index-url",
        index,
        "uv==0.13.9",
    ]


@pytest.mark.parametrize("venv", HOSTILE_VENVS)
def test_python_venv_passes_the_path_as_one_argument(sandbox, venv):
    with patch.object(python_env, "uv_path", return_value=sandbox.tool):
        [command] = shell_commands(
            yielded(python_env.python_venv, {PythonVersion: None}, path=venv, python_version="3.12")
        )
    assert sandbox.run(command).returncode == 0
    assert not sandbox.marker.exists()
    assert sandbox.argv() == ["venv", "--clear", "--python", "3.12", venv]


# -- the audit's loads and the benchmark script (checks/host_context.ship_and_run) ----------


@pytest.mark.parametrize("venv", HOSTILE_VENVS)
@pytest.mark.parametrize("load", [audit.copy_load, audit.link_probe])
def test_copy_load_and_link_probe_run_the_venvs_python_as_one_word(sandbox, venv, load):
    # venv_path's validation now refuses these; the quoting holds without it.
    command = load(HostConfig().model_copy(update={"venv_path": venv}))
    assert f"{venv}/bin/python" in words(command.splitlines()[-1])
    result = sandbox.run(command, STANDARD_PATH)
    assert result.returncode == 127  # that python does not exist here
    assert not sandbox.marker.exists()


def test_ship_and_run_writes_nothing_when_it_gets_no_folder(sandbox):
    # mktemp missing (not on PATH): no folder, so nothing is written and nothing runs.
    command = audit.copy_load(HostConfig())
    result = sandbox.run(command.replace("/bin/python", "/bin/true"))
    assert result.returncode == 1 and "mktemp" in result.stderr
    assert "copy_load.py" not in result.stderr


@pytest.mark.parametrize(
    "key_file", ["/etc/sglang/x'$(injected)'.yaml", "/etc/sglang/x';injected;'.yaml"]
)
def test_bench_script_names_an_unreadable_key_file_without_running_it(sandbox, key_file):
    config = HostConfig(venv_path=str(sandbox.root / "venv"))
    script = bench_script(config, bench_settings(config, "0.5.23"), str(sandbox.root), key_file)
    result = sandbox.run(script, STANDARD_PATH, shell="/bin/bash")
    assert result.returncode == KEY_UNREADABLE
    assert f"cannot read the API key from {key_file}" in result.stderr
    assert not sandbox.marker.exists()


# -- kernel headers, apt sources: names read from the host --------------------------------


@pytest.mark.parametrize("lists", [True, False])
def test_a_headers_package_name_read_from_the_host_is_one_word(lists):
    package = "linux-headers-6.1$(injected);injected"
    fact = {
        "kernel_release": "6.1",
        "package": package,
        "installed": False,
        "candidate": "6.1-1",
        "apt_lists_present": lists,
    }
    facts = {KernelHeaders: fact, Virtualization: {"container": None, "vm": None}}
    [command] = shell_commands(yielded(kernel_headers, facts))
    assert words(command).count(package) == (2 if not lists else 1)


def test_kernel_headers_fact_quotes_the_template_and_reads_the_running_kernel(sandbox):
    (sandbox.bin / "uname").write_text("#!/bin/sh\necho 6.1.0-27-amd64\n")
    (sandbox.bin / "uname").chmod(0o755)
    command = KernelHeaders().command("linux-headers-{kernel_release}-$(injected)`injected`")
    # Only uname and injected on PATH: dpkg-query, apt-cache and ls are "not found".
    result = sandbox.run(command)
    assert result.stdout.splitlines() == [
        "6.1.0-27-amd64",
        "linux-headers-6.1.0-27-amd64-$(injected)`injected`",
        "absent",
        "(none)",
        "nolists",
    ]
    assert not sandbox.marker.exists()


def test_an_apt_source_file_read_from_the_host_is_one_word():
    path = "/etc/apt/sources.list.d/x;injected;#.list"
    entry = {"file": path, "line": 2, "format": "one-line", "uris": [], "components": ["main"]}
    [command] = shell_commands(
        yielded(apt_components, {AptSourceEntries: [entry]}, components=["contrib"])
    )
    assert words(command) == ["sed", "-i", "2s/[[:space:]]*$/ contrib/", path]


def test_sandbox_detects_an_unquoted_value(sandbox):
    # The proof above is only as good as its detector: an unquoted value does run.
    assert sandbox.run(f"true {HOSTILE_VENVS[1]}").returncode == 0
    assert sandbox.marker.exists()
    assert HOSTILE_VENVS[1] not in words(f"ls {HOSTILE_VENVS[1]}")


# -- monitoring --------------------------------------------------------------------------------

HOSTILE_KEY_URLS = [
    "http://h/k?x=$(injected${IFS}y)",
    "http://h/k?x=`injected`",
    'http://h/k?x="$(injected)"',
    "http://h/k?x=';injected;'",
]


@pytest.mark.parametrize("url", HOSTILE_KEY_URLS)
def test_grafana_key_url_never_runs_as_shell_code(sandbox, url):
    """monitoring_grafana_key_url passes HttpUrl with $( ) in its query; the refusal message
    naming it once ran it inside "..." as root (issue 46, M3). curl and gpg are stand-ins
    that fetch no key, so the command takes the message's branch."""
    from pyinfra.facts.server import Command

    from roles import monitoring

    for program in ("curl", "gpg"):
        (sandbox.bin / program).write_text("#!/bin/sh\nexit 0\n")
        (sandbox.bin / program).chmod(0o755)
    fingerprint = "B53AE77BADB630A683046005963FA27710458545"
    [command] = shell_commands(
        yielded(
            monitoring.grafana_keyring,
            {Command: ""},
            key_url=url,
            fingerprint=fingerprint,
            keyring=str(sandbox.root / "grafana.gpg"),
        )
    )
    result = sandbox.run(command, STANDARD_PATH, shell="/bin/bash")
    assert result.returncode == 1, result.stderr
    assert not sandbox.marker.exists(), command
    assert f"the key file at {url} has no key {fingerprint} (found: )" in result.stderr
