"""Real Debian 12 test hosts on this machine: systemd as PID 1 and sshd, booted with
systemd-nspawn, each reachable over SSH on its own 127.0.0.x address.

The debootstrap tree is built once and cached as a tarball; each host unpacks it, gets its
own hostname, listen address and unique host keys, and accepts a per-run SSH key. Host keys
are read from the host's tree into a known_hosts file, so host key checking stays on.
Teardown stops only the systemd-nspawn processes this pool started.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SUITE = "bookworm"
INCLUDE = "systemd,systemd-sysv,dbus,openssh-server,python3,iproute2,sudo,ca-certificates,gnupg"
BOOT_TIMEOUT_S = 60
# systemd-nspawn's exit status when the container's init asked for a reboot.
NSPAWN_REBOOT_STATUS = 133


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("PYINFRA_SGLANG_TEST_CACHE", Path(base) / "pyinfra-sglang"))


def why_unavailable() -> str | None:
    """Why test hosts cannot be booted here, or None when they can."""
    if os.geteuid() != 0:
        return "test hosts need root (systemd-nspawn, debootstrap); CI runs as root"
    missing = [
        tool for tool in ("systemd-nspawn", "debootstrap", "ssh-keygen") if not shutil.which(tool)
    ]
    if missing:
        return (
            f"test hosts need {', '.join(missing)} "
            "(apt-get install systemd-container debootstrap openssh-client)"
        )
    return None


def root_tarball() -> Path:
    """The cached debootstrap tree for test hosts, built on first use."""
    digest = hashlib.sha256(f"{SUITE}|minbase|{INCLUDE}".encode()).hexdigest()[:12]
    tarball = cache_dir() / f"test-host-{SUITE}-{digest}.tar"
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with open(tarball.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building it right now
        if tarball.exists():
            return tarball
        tree = tarball.with_suffix(".tree")
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, str(tree)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(tree), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
        shutil.rmtree(tree)
    return tarball


def _port_open(address: str, port: int = 22, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class TestHost:
    name: str  # machine name and hostname
    address: str  # 127.0.0.x, where its sshd listens
    root: Path  # its filesystem tree on this machine
    log: Path
    process: subprocess.Popen | None = field(default=None, repr=False)
    boots: int = 0  # how many times systemd-nspawn started it (a reboot adds one)
    stopping: bool = False

    def ssh_command(self, pool: TestHostPool, command: str) -> list[str]:
        return [
            "ssh",
            "-q",
            "-i",
            str(pool.key),
            "-o",
            f"UserKnownHostsFile={pool.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"root@{self.address}",
            command,
        ]


class TestHostPool:
    """Boots and stops test hosts; shares one SSH key and known_hosts file among them."""

    def __init__(self, workdir: Path, first_octet: int = 11):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.key = workdir / "id_ed25519"
        self.known_hosts = workdir / "known_hosts"
        self.known_hosts.touch()
        self.hosts: list[TestHost] = []
        self._next_octet = first_octet
        self._run_id = hashlib.sha1(str(workdir).encode()).hexdigest()[:6]
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "pyinfra-sglang-tests",
                "-f",
                str(self.key),
            ],
            check=True,
        )

    def _free_address(self) -> str:
        # Hosts share this machine's network namespace: skip addresses another sshd holds.
        while True:
            address = f"127.0.0.{self._next_octet}"
            self._next_octet += 1
            if self._next_octet > 250:
                raise RuntimeError("no free 127.0.0.x address left for test hosts")
            if not _port_open(address):
                return address

    def boot(self, count: int) -> list[TestHost]:
        tarball = root_tarball()
        new = [self._prepare(tarball) for _ in range(count)]
        for test_host in new:
            self._start(test_host)
        for test_host in new:
            self._wait_for_ssh(test_host)
        self.hosts += new
        return new

    def _prepare(self, tarball: Path) -> TestHost:
        address = self._free_address()
        name = f"psg{self._run_id}-{address.rsplit('.', 1)[1]}"
        root = self.workdir / name
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        with tarfile.open(tarball) as archive:
            archive.extractall(root, filter="fully_trusted")
        (root / "etc/hostname").write_text(f"{name}\n")
        (root / "etc/ssh/sshd_config.d/test-host.conf").write_text(
            f"ListenAddress {address}\nPermitRootLogin prohibit-password\nUseDNS no\n"
        )
        ssh_dir = root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        shutil.copy(self.key.with_suffix(".pub"), ssh_dir / "authorized_keys")
        # Unique host keys per host, recorded for known_hosts: host key checking stays on.
        for old in (root / "etc/ssh").glob("ssh_host_*"):
            old.unlink()
        subprocess.run(
            ["chroot", str(root), "ssh-keygen", "-A"], check=True, stdout=subprocess.DEVNULL
        )
        with self.known_hosts.open("a") as known:
            for pub in sorted((root / "etc/ssh").glob("ssh_host_*_key.pub")):
                key_type, key = pub.read_text().split()[:2]
                known.write(f"{address} {key_type} {key}\n")
        return TestHost(name=name, address=address, root=root, log=self.workdir / f"{name}.log")

    def _start(self, test_host: TestHost) -> None:
        # This machine's PID 1 is not systemd: nspawn must not register or move scopes.
        with open(test_host.log, "ab") as log:
            test_host.process = subprocess.Popen(
                [
                    "systemd-nspawn",
                    "-q",
                    "--register=no",
                    "--keep-unit",
                    "-D",
                    str(test_host.root),
                    "-b",
                    "-M",
                    test_host.name,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        test_host.boots += 1
        watcher = threading.Thread(
            target=self._boot_again_after_reboot, args=(test_host, test_host.process), daemon=True
        )
        watcher.start()

    def _boot_again_after_reboot(self, test_host: TestHost, process: subprocess.Popen) -> None:
        # A reboot inside the host ends systemd-nspawn with 133: boot it again, as a
        # machine would come back, so deploys can wait for it over SSH.
        if process.wait() == NSPAWN_REBOOT_STATUS and not test_host.stopping:
            self._start(test_host)

    def _wait_for_ssh(self, test_host: TestHost) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if test_host.process is not None and test_host.process.poll() is not None:
                raise RuntimeError(
                    f"test host {test_host.name} exited with {test_host.process.returncode} "
                    f"while booting; see {test_host.log}"
                )
            if _port_open(test_host.address):
                return
            time.sleep(0.2)
        raise TimeoutError(f"test host {test_host.name} did not open SSH in {BOOT_TIMEOUT_S}s")

    def run(
        self, test_host: TestHost, command: str, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run a shell command on a test host over SSH (for assertions about its state)."""
        return subprocess.run(
            test_host.ssh_command(self, command),
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def stop(self, test_host: TestHost) -> None:
        test_host.stopping = True
        process = test_host.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)  # nspawn turns this into a clean poweroff
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop_all(self) -> None:
        for test_host in self.hosts:
            self.stop(test_host)
        for test_host in self.hosts:
            shutil.rmtree(test_host.root, ignore_errors=True)

    def inventory_data(self) -> dict[str, object]:
        """The pyinfra connector data every test host needs, as a user would set it."""
        return {
            "ssh_user": "root",
            "ssh_key": str(self.key),
            "ssh_known_hosts_file": str(self.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "ssh_look_for_keys": False,
            "ssh_allow_agent": False,
        }
