"""The service role's handling of secrets and of its user, with the role's real shell commands
run on this machine's file system (paths under tmp_path) and an upload that behaves as
pyinfra's SSH connector and OpenSSH's SFTP server do: staging files, modes, owners, cleanup
after a failed upload, the journal tail it prints, the string form of its command."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest
from pyinfra.api import Inventory
from pyinfra.facts.server import Command
from pyinfra.facts.systemd import SystemdStatus

import roles.service_apply as engine
import roles.sglang_service as role
from checks.facts import (
    FileDigests,
    IommuState,
    NvidiaGpus,
    NvidiaP2P,
    NvidiaTopology,
    PcieAcs,
    Virtualization,
)
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.serving.render import RenderedFile
from pyinfra_sglang.serving.service_files import ServiceFiles
from tests.unit.captures import captured_lines
from tests.unit.ophelper import run_operation

API_KEY = "sk-unit-APIKEY-5551234"
HF_TOKEN = "hf_unit_TOKEN_qwertyuiop"
QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
H200X2 = NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY))
Line = namedtuple("Line", "line")
ME = pwd.getpwuid(os.getuid()).pw_name

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the role chowns files to root and to its user: run as root (CI is)"
)


class LocalHost:
    """A pyinfra host whose commands run here (sh -c) and whose put_file writes as pyinfra's
    SSH connector does: straight into the path over SFTP, or, with _sudo, into a temporary
    file (remote_temp_filename, else a new one) copied into place with cp. The SFTP server
    opens with O_CREAT|O_TRUNC and mode 0666 less its umask (OpenSSH's sftp-server): a new
    file is 0644, an existing one keeps its mode. Records each file's mode as its content is
    written; ``fail_on``: a path suffix whose upload breaks halfway."""

    name = "gpu-host"
    print_prefix = "[gpu-host] "

    def __init__(self, tmp_path: Path, arguments: dict | None = None, fail_on: str | None = None):
        self.tmp_path = tmp_path
        self.current_op_global_arguments = arguments or {}
        self.fail_on = fail_on
        self.mode_when_written: dict[str, int] = {}
        self.folder_when_written: dict[str, tuple[int, int]] = {}
        self.commands: list[str] = []
        self.uploads: list[dict] = []

    def run_shell_command(self, command, **arguments):
        command = str(command)
        self.commands.append(command)
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        lines = (done.stdout + done.stderr).splitlines()
        return done.returncode == 0, [Line(line) for line in lines]

    def _sftp_write(self, path: str, data: bytes) -> None:
        old = os.umask(0o022)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        finally:
            os.umask(old)
        with os.fdopen(fd, "wb") as out:
            self.mode_when_written[path] = stat.S_IMODE(os.fstat(out.fileno()).st_mode)
            folder = os.stat(os.path.dirname(path))
            self.folder_when_written[path] = (folder.st_uid, stat.S_IMODE(folder.st_mode))
            if self.fail_on and path.endswith(self.fail_on):
                out.write(data[: len(data) // 2])
                raise OSError("the SSH connection broke")
            out.write(data)

    def put_file(self, file_io, remote, remote_temp_filename=None, **arguments):
        data = file_io.read()
        self.uploads.append({"remote": remote, "temp": remote_temp_filename, **arguments})
        if not any(arguments.get(key) for key in ("_sudo", "_su_user", "_doas", "_dzdo")):
            self._sftp_write(remote, data)
            return True
        temp = remote_temp_filename or str(self.tmp_path / f"pyinfra-{len(self.uploads)}")
        self.mode_when_written[remote] = None  # set by cp: it keeps an existing file's mode
        self._sftp_write(temp, data)
        subprocess.run(["cp", temp, remote], check=True)
        self.mode_when_written[remote] = stat.S_IMODE(os.stat(remote).st_mode)
        os.remove(temp)
        return True


@pytest.fixture
def paths(tmp_path, monkeypatch):
    """The service's paths under tmp_path, and this user as the service user."""
    try:
        grp.getgrnam(ME)
    except KeyError:
        pytest.skip(f"no group named {ME}: the role gives its user a group of its own name")
    etc = tmp_path / "etc"
    files = {
        "unit": str(etc / "systemd/system/sglang.service"),
        "env": str(etc / "sglang/sglang.env"),
        "config": str(etc / "sglang/sglang.yaml"),
    }
    caches = [str(tmp_path / "var/lib/sglang" / name) for name in ("huggingface", "triton")]
    monkeypatch.setattr(role, "service_file_path", lambda kind: files[kind])
    monkeypatch.setattr(role, "cache_folders", lambda: caches)
    monkeypatch.setattr(role, "service_user", lambda: ME)
    return {**files, "caches": caches, "secrets_dir": str(etc / "sglang")}


def rendered(paths) -> tuple[RenderedFile, ...]:
    return (
        RenderedFile(paths["unit"], "[Service]\nUser=sglang\n", "644"),
        RenderedFile(paths["env"], f"HF_TOKEN={HF_TOKEN}\n", "600"),
        RenderedFile(paths["config"], f'api-key: "{API_KEY}"\n', "600"),
    )


def install(host, files: tuple[RenderedFile, ...]) -> None:
    """The engine's install of ``files``, as the role plans it."""
    service = ServiceFiles("sglang.service", files, None, 5)
    engine.install_files(host, role.service_plan(service, keep_previous=False))


def mode_owner(path: str) -> tuple[str, str, str]:
    info = os.stat(path)
    return (
        oct(stat.S_IMODE(info.st_mode))[2:],
        pwd.getpwuid(info.st_uid).pw_name,
        grp.getgrgid(info.st_gid).gr_name,
    )


# --- staging, modes, owners ----------------------------------------------------------------


@needs_root
def test_secret_files_are_0600_before_their_content_is_written(tmp_path, paths):
    files = rendered(paths)
    host = LocalHost(tmp_path)
    install(host, files)
    for f in files:
        staging = f.path + engine.STAGING_SUFFIX
        # The SFTP server wrote into a file that already had the final mode.
        assert oct(host.mode_when_written[staging])[2:] == f.mode, f.path
        assert Path(f.path).read_text() == f.content
        assert not Path(staging).exists()
    assert mode_owner(paths["env"]) == ("600", "root", "root")  # systemd reads it as root
    assert mode_owner(paths["config"]) == ("600", ME, ME)  # SGLang reads it as its user
    assert mode_owner(paths["unit"]) == ("644", "root", "root")


@needs_root
def test_the_secrets_folder_is_0750_for_the_service_group_and_not_reset_to_755(tmp_path, paths):
    os.makedirs(paths["secrets_dir"], mode=0o755)
    host = LocalHost(tmp_path)
    install(host, rendered(paths))
    assert mode_owner(paths["secrets_dir"]) == ("750", "root", ME)
    install(host, rendered(paths))
    assert mode_owner(paths["secrets_dir"]) == ("750", "root", ME)
    for cache in paths["caches"]:
        assert mode_owner(cache) == ("750", ME, ME)


@needs_root
def test_caches_filled_as_root_are_handed_to_the_service_user(tmp_path, paths, monkeypatch):
    hub = Path(paths["caches"][0]) / "hub/models--x/blobs"
    hub.mkdir(parents=True)
    (hub / "weights").write_text("w")
    # As if an earlier release had run as root: everything root's.
    subprocess.run(["chown", "-R", "root:root", str(Path(paths["caches"][0]).parent)], check=True)
    install(LocalHost(tmp_path), rendered(paths))
    assert mode_owner(str(hub / "weights"))[1:] == (ME, ME)


@needs_root
@pytest.mark.parametrize("broken", [".env.new", ".yaml.new"])
def test_a_broken_upload_leaves_no_staging_file_and_the_old_files(tmp_path, paths, broken):
    files = rendered(paths)
    install(LocalHost(tmp_path), files)  # a working version first
    before = {f.path: Path(f.path).read_text() for f in files}
    changed = tuple(RenderedFile(f.path, f.content.replace("unit", "next"), f.mode) for f in files)
    host = LocalHost(tmp_path, fail_on=broken)
    with pytest.raises(OSError, match="SSH connection broke"):
        install(host, changed)
    broken_path = next(p for p in host.mode_when_written if p.endswith(broken))
    assert host.mode_when_written[broken_path] == 0o600  # half a secret, but never readable
    assert not [p for p in Path(paths["secrets_dir"]).iterdir() if p.name.endswith(".new")]
    assert not Path(paths["unit"] + engine.STAGING_SUFFIX).exists()
    assert {f.path: Path(f.path).read_text() for f in files} == before


@needs_root
def test_a_leftover_staging_file_is_replaced_not_reused(tmp_path, paths):
    leftover = Path(paths["config"] + engine.STAGING_SUFFIX)
    leftover.parent.mkdir(parents=True)
    leftover.write_text("stale")
    leftover.chmod(0o644)
    host = LocalHost(tmp_path)
    install(host, rendered(paths))
    assert host.mode_when_written[str(leftover)] == 0o600


@needs_root
def test_under_sudo_the_temporary_upload_lies_in_a_private_folder(tmp_path, paths):
    host = LocalHost(tmp_path, arguments={"_sudo": True})
    files = rendered(paths)
    install(host, files)
    temps = [upload["temp"] for upload in host.uploads]
    assert all(temps), host.uploads  # in our own mktemp -d folder, not pyinfra's /tmp name
    assert len({Path(temp).parent for temp in temps}) == len(temps)  # a new folder each
    for temp in temps:
        # Written inside a folder only this user could enter, removed with it after.
        assert host.folder_when_written[temp] == (os.getuid(), 0o700)
        assert not Path(temp).parent.exists()
    for f in files:
        assert Path(f.path).read_text() == f.content
        assert oct(host.mode_when_written[f.path + engine.STAGING_SUFFIX])[2:] == f.mode


# --- the journal tail on a failed start ----------------------------------------------------


class FailingStartHost:
    """Answers the role's commands for a server that exits at start, its journal holding the
    start line SGLang logs (server_args=ServerArgs(...), key included)."""

    name = "gpu-host"
    print_prefix = "[gpu-host] "
    current_op_global_arguments: dict = {}

    def __init__(self, inventory):
        self.inventory = inventory
        self.commands: list[str] = []

    def run_shell_command(self, command, **arguments):
        command = str(command)
        self.commands.append(command)
        if command.startswith("systemctl show"):
            return True, [Line("ActiveState=failed"), Line("SubState=failed")]
        if command.startswith("journalctl"):
            return True, [
                Line(
                    f"[2026-01-01 10:00:00] server_args=ServerArgs(model_path='broken/model', "
                    f"api_key='{API_KEY}', tp_size=2)"
                ),
                Line(f"downloading with HF_TOKEN={HF_TOKEN}"),
                # Named nowhere: only the values the role knows find these.
                Line(f"401 Client Error: token {HF_TOKEN} is not valid for broken/model"),
                Line(f"ValueError: bad header value {API_KEY}"),
                Line("RuntimeError: Failed to load model broken/model"),
            ]
        return True, []


def test_the_journal_tail_is_printed_without_secrets(tmp_path, monkeypatch, caplog):
    for name, value in (("api-key", API_KEY), ("hf-token", HF_TOKEN)):
        (tmp_path / name).write_text(value + "\n")
        (tmp_path / name).chmod(0o600)
    inventory = Inventory(
        (
            ["gpu-host"],
            {
                "sglang_api_key_file": str(tmp_path / "api-key"),
                "hf_token_file": str(tmp_path / "hf-token"),
            },
        )
    )
    monkeypatch.setattr(engine, "install_files", lambda host_, plan: None)
    service = ServiceFiles("sglang.service", (), "http://127.0.0.1:30000/health", 5)
    with caplog.at_level("ERROR"):
        # A failure ends the operation with its message (False), not with a traceback.
        ok = engine.apply_with_rollback(
            None, FailingStartHost(inventory), role.service_plan(service, keep_previous=False)
        )
    assert ok is False
    shown = caplog.text
    assert "did not come up" in shown and "Traceback" not in shown
    assert "Failed to load model broken/model" in shown and "model_path='broken/model'" in shown
    assert API_KEY not in shown and HF_TOKEN not in shown
    assert "api_key='********'" in shown


# --- the operation's command, the user ----------------------------------------------------


def test_the_apply_command_string_holds_no_secret(tmp_path):
    for name, value in (("api-key", API_KEY), ("hf-token", HF_TOKEN)):
        (tmp_path / name).write_text(value + "\n")
        (tmp_path / name).chmod(0o600)
    config = HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_api_key_file=tmp_path / "api-key",
        hf_token_file=tmp_path / "hf-token",
    )
    facts = {
        NvidiaGpus: H200X2,
        NvidiaTopology: {},
        # The peer-traffic readings the role takes for several GPUs (checks/peer_path.py):
        # none to be had (no nvidia-smi matrix, no lspci, no IOMMU), as on a bare machine.
        NvidiaP2P: {},
        PcieAcs: PcieAcs().process(["### lspci no"]),
        IommuState: IommuState().process(["", "### iommu_groups=0"]),
        Virtualization: Virtualization().process(["none", "none"]),
        FileDigests: {},
        SystemdStatus: {"sglang.service": True},
    }
    [command], _ = run_operation(role.sglang_service, facts, config=config)
    assert command.startswith("FunctionCommand(apply_with_rollback, (ApplyPlan(")
    assert "/etc/sglang/sglang.yaml" in command and "/etc/sglang/sglang.env" in command
    assert API_KEY not in command and HF_TOKEN not in command
    assert "--tp-size" not in command  # no content at all, not only no secret


def test_the_user_is_created_once():
    def getent(output):
        return {Command: lambda command: output if command.startswith("getent passwd") else None}

    commands, noops = run_operation(role.sglang_user, getent(None))
    assert commands == [
        "useradd --system --user-group --no-create-home --home-dir /var/lib/sglang "
        "--shell /usr/sbin/nologin sglang"
    ]
    assert noops == []
    entry = "sglang:x:999:999::/var/lib/sglang:/usr/sbin/nologin"
    assert run_operation(role.sglang_user, getent(entry)) == ([], ["system user sglang exists"])


def test_file_owners():
    assert role.file_owner("/etc/sglang/sglang.yaml") == "sglang:sglang"
    assert role.file_owner("/etc/sglang/sglang.env") == "root:root"
    assert role.file_owner("/etc/systemd/system/sglang.service") == "root:root"
