"""Real Debian 12 test hosts on this machine: systemd as PID 1 and sshd, booted with
systemd-nspawn, each reachable over SSH on its own 127.0.0.x address.

A pool made with ``private_network=True`` boots each host in its own network namespace
instead, attached to a bridge this pool creates (10.213.N.0/24, this machine is .1): the
hosts can firewall themselves and reach each other and the controller, nothing else.

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

from tests.sharding import SHARD_ENV, address_slice

SUITE = "bookworm"
# nftables: Debian installs it by default (Priority: important); minbase leaves it out, and
# hosts on a private network cannot fetch it.
INCLUDE = (
    "systemd,systemd-sysv,dbus,openssh-server,python3,iproute2,sudo,ca-certificates,gnupg,nftables"
)
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


def remove_tree(path: Path) -> None:
    """``path`` and everything under it removed by rm(1), never crossing into another
    filesystem. Not shutil.rmtree: in a test process that imported pyinfra's CLI, gevent's
    monkey-patched os.close (gevent >= 25.8.1) defers closing anything but a regular file to
    its hub's loop once a hub exists, so rmtree's one descriptor per directory stays open
    until the loop next runs: a CI shard removing its host roots at its end ran out of
    descriptors (EMFILE at 20,000)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


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
        remove_tree(tree)
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, str(tree)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(tree), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
        remove_tree(tree)
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


def _free_subnet() -> str:
    """A 10.213.N prefix no interface of this machine uses yet."""
    used = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for third in address_slice(1, 254, os.environ.get(SHARD_ENV)):
        prefix = f"10.213.{third}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.213.N.0/24 subnet left for a private test network")


class PrivateNetwork:
    """A bridge on this machine that private-network test hosts attach to."""

    def __init__(self, run_id: str):
        self.bridge = f"psb{run_id}"
        self.prefix = _free_subnet()
        self.gateway = f"{self.prefix}.1"
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.bridge], check=False)


class TestHostPool:
    """Boots and stops test hosts; shares one SSH key and known_hosts file among them."""

    __test__ = False  # a helper, not a test class, wherever a test module imports it

    def __init__(self, workdir: Path, private_network: bool = False):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.key = workdir / "id_ed25519"
        self.known_hosts = workdir / "known_hosts"
        self.known_hosts.touch()
        self.hosts: list[TestHost] = []
        # Loopback hosts: this shard's slice of 127.0.0.11-250 (tests/sharding.py), so
        # shards running side by side never pick the same address.
        self._octets = address_slice(11, 250, os.environ.get(SHARD_ENV))
        self._next_octet = self._octets.start
        self._run_id = hashlib.sha1(str(workdir).encode()).hexdigest()[:6]
        self.network = PrivateNetwork(self._run_id) if private_network else None
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
        if self.network:  # the pool's own subnet: every address is this pool's to give
            address = f"{self.network.prefix}.{self._next_octet}"
            self._next_octet += 1
            return address
        # Hosts share this machine's network namespace: skip addresses another sshd holds.
        while True:
            if self._next_octet not in self._octets:
                raise RuntimeError("no free 127.0.0.x address left for test hosts")
            address = f"127.0.0.{self._next_octet}"
            self._next_octet += 1
            if not _port_open(address):
                return address

    def boot(self, count: int) -> list[TestHost]:
        tarball = root_tarball()
        new = [self._prepare(tarball) for _ in range(count)]
        self.hosts += new  # stop_all stops them even when one fails to boot
        for test_host in new:
            self._start(test_host)
        for test_host in new:
            self._wait_for_ssh(test_host)
        return new

    def _prepare(self, tarball: Path) -> TestHost:
        address = self._free_address()
        name = f"psg{self._run_id}-{address.rsplit('.', 1)[1]}"
        root = self.workdir / name
        remove_tree(root)
        root.mkdir()
        with tarfile.open(tarball) as archive:
            archive.extractall(root, filter="fully_trusted")
        (root / "etc/hostname").write_text(f"{name}\n")
        # In its own namespace sshd may listen everywhere; on the shared one, on its address.
        listen = "" if self.network else f"ListenAddress {address}\n"
        (root / "etc/ssh/sshd_config.d/test-host.conf").write_text(
            f"{listen}PermitRootLogin prohibit-password\nUseDNS no\n"
        )
        if self.network:
            self._configure_private_address(root, address)
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

    def _configure_private_address(self, root: Path, address: str) -> None:
        # systemd-networkd configures nspawn's host0 interface; the name sorts before
        # systemd's own 80-container-host0.network (DHCP), so the first match is ours.
        (root / "etc/systemd/network/10-test-host0.network").write_text(
            f"[Match]\nName=host0\n\n[Network]\nAddress={address}/24\n"
            f"Gateway={self.network.gateway}\n"
        )
        subprocess.run(
            ["chroot", str(root), "systemctl", "enable", "systemd-networkd"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

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
                    *([f"--network-bridge={self.network.bridge}"] if self.network else []),
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
            remove_tree(test_host.root)
        if self.network:
            self.network.remove()

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
