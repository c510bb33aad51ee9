"""deploy/site.py's NVIDIA repository, driver and CUDA roles on real Debian 12 test hosts,
with the inventory's mirror pointing at the signed stand-in for NVIDIA's repository."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang.inventory import HostConfig, versioned_venv_path
from tests.hosts.apply import apply, write_inventory
from tests.hosts.audit_report import assert_audit_changed_nothing

pytestmark = pytest.mark.hosts

LIST_FILE = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
# Debian 12's compute install with open modules, by Debian's names (data/nvidia.toml).
DRIVER = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
# Fabric Manager goes with the driver's release (roles/fabric_manager.py: the replayed H200s
# are fabric-attached, the test hosts containers): a test that moves the driver by hand moves
# it too, as an operator would.
FM = "nvidia-fabricmanager"
BRANCH_VERSIONS = {580: "580.126.20-1", 590: "590.48.01-1", 595: "595.58.03-1"}
# CUDA 13.1 Update 1 needs driver >= 590.48.01 (data/nvidia.toml): an older driver goes
# with CUDA 13.0, keeping the site's venv (its path would follow the CUDA release).
SITE_VENV = versioned_venv_path(HostConfig().sglang_version, "3.11", "13.1")
CUDA_13_0 = ("--data", 'cuda_version="13.0"', "--data", f"venv_path={SITE_VENV}")
TOOLKIT_FOR = {580: CUDA_13_0, 590: (), 595: ()}


def versions(host_pool, test_host, packages) -> dict[str, str]:
    out = host_pool.run(
        test_host,
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
        f"{' '.join(packages)}",
        check=False,
    ).stdout
    return {
        name: version
        for name, version, status in (line.split(" ", 2) for line in out.splitlines())
        if status.startswith("ii")
    }


def assert_second_apply_changes_nothing(inventory, *options):
    again = apply(inventory, options=options)
    assert again.returncode == 0 and not again.errors(), again.describe()
    again.assert_unchanged()


def test_driver_and_cuda_installed_then_nothing_changes(
    host_pool, hosts, inventory, nvidia_mirror, site_first_apply
):
    first = site_first_apply
    assert first.returncode == 0 and not first.errors(), first.describe()
    for h in hosts:
        changed = first.changed(h.address)
        for op in (
            "NVIDIA repository | Enable the distro components NVIDIA's packages need",
            "NVIDIA repository | Disable other apt entries for NVIDIA's repository",
            "NVIDIA repository | Install NVIDIA's repository signing key (cuda-keyring)",
            "NVIDIA repository | Point apt at NVIDIA's repository",
            "NVIDIA driver | Lock the driver to branch 590",
            "NVIDIA driver | Install the compute driver (open modules)",
            "NVIDIA driver | Blacklist nouveau",
            "NVIDIA driver | Enable nvidia-persistenced",
            "CUDA Toolkit | Install CUDA Toolkit 13.1",
        ):
            assert op in changed, (op, first.describe())
        # Containers: no initramfs and no reboot for a kernel module that is not theirs.
        assert "NVIDIA driver | Reboot into the installed driver" in first.unchanged(h.address)
    assert "the outer host loads the kernel module" in first.stderr
    assert "reports release 13.1 (V13.1.80)" in first.stderr

    for h in hosts:
        installed = versions(
            host_pool,
            h,
            [
                *DRIVER,
                "nvidia-driver-pinning-590",
                "cuda-toolkit-13-1",
                "cuda-drivers",
                "nvidia-open",
            ],
        )
        assert installed == {
            **{p: "590.48.01-1" for p in DRIVER},
            "nvidia-driver-pinning-590": "590.48.01-1",
            "cuda-toolkit-13-1": "13.1.0-1",
        }, installed  # the toolkit pulled no driver metapackage
        run = lambda command, h=h: host_pool.run(h, command).stdout  # noqa: E731
        assert run(f"cat {LIST_FILE}").splitlines()[-1] == (
            f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            f"{nvidia_mirror.url}/debian12/x86_64/ /"
        )
        assert run("grep -E '^deb ' /etc/apt/sources.list").split()[3:] == ["main", "contrib"]
        assert "blacklist nouveau" in run("cat /etc/modprobe.d/blacklist-nouveau.conf")
        assert run(
            "systemctl is-enabled nvidia-persistenced; systemctl is-active nvidia-persistenced"
        ).split() == ["enabled", "active"]
        assert "release 13.1, V13.1.80" in run("bash -lc 'nvcc --version'")
        assert run("bash -lc 'command -v nvcc'").strip() == "/usr/local/cuda-13.1/bin/nvcc"
        assert (
            run("cat /etc/ld.so.conf.d/cuda.conf").splitlines()[-1] == "/usr/local/cuda-13.1/lib64"
        )
        assert "GPU 1: NVIDIA H200" in run("nvidia-smi -L")
        # The entry the host carried before (another keyring, same repository) is disabled,
        # or apt-get update would fail with "Conflicting values set for option Signed-By".
        listed = run(
            "cat /etc/apt/sources.list.d/nvidia-cuda.list "
            "/etc/apt/sources.list.d/cuda.sources 2>/dev/null; true"
        )
        assert listed and all(
            line.startswith(f"# disabled by pyinfra-sglang, {LIST_FILE} has this repository: ")
            for line in listed.splitlines()
        ), listed
        assert run("dpkg -S /usr/bin/nvidia-smi").split(":")[0] == "nvidia-driver-cuda"

    assert_second_apply_changes_nothing(inventory)


def driver_packages_by_branch(host_pool, test_host) -> dict[str, set[str]]:
    """Every installed NVIDIA driver package, by the branch its version is on."""
    out = host_pool.run(
        test_host,
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
        "'nvidia-*' 'libnvidia-*' 'cuda-drivers'",
        check=False,
    ).stdout
    by_branch: dict[str, set[str]] = {}
    for name, version, status in (line.split(" ", 2) for line in out.splitlines()):
        if status.startswith("ii") and not name.startswith("nvidia-driver-pinning"):
            by_branch.setdefault(version.split(".")[0], set()).add(name)
    return by_branch


def test_branch_moves_take_every_driver_package_along(host_pool, hosts, inventory):
    # A metapackage installed beside the driver (an operator's, or a full install's): it
    # depends with >=, so a move that names only the role's packages would leave it behind.
    for h in hosts:
        host_pool.run(h, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-open")
    try:
        for branch in (595, 590, 580, 590):
            version = BRANCH_VERSIONS[branch]
            options = ("--data", f"nvidia_driver_branch={branch}", *TOOLKIT_FOR[branch])
            result = apply(inventory, options=options)
            assert result.returncode == 0 and not result.errors(), result.describe()
            for h in hosts:
                assert f"NVIDIA driver | Lock the driver to branch {branch}" in result.changed(
                    h.address
                )
                pins = [f"nvidia-driver-pinning-{b}" for b in BRANCH_VERSIONS]
                installed = versions(host_pool, h, [*DRIVER, "nvidia-open", *pins])
                assert installed == {
                    **{p: version for p in [*DRIVER, "nvidia-open"]},
                    f"nvidia-driver-pinning-{branch}": version,
                }
                # No driver package of another branch remains.
                assert set(driver_packages_by_branch(host_pool, h)) == {str(branch)}
            assert_second_apply_changes_nothing(inventory, *options)
    finally:
        for h in hosts:
            host_pool.run(h, "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q nvidia-open")


def test_an_exact_release_is_locked_with_nvidias_version_pin(host_pool, hosts, inventory):
    # nvidia_driver_version: nvidia-driver-pinning-<version> replaces the branch's pin and
    # takes every driver package to that release (a downgrade from the branch's newest here);
    # CUDA 13.1 Update 1 needs 590.48.01, so the older release goes with CUDA 13.0.
    old, new = "590.44.01", "590.48.01-1"
    options = ("--data", f"nvidia_driver_version={old}", *CUDA_13_0)
    pins = ["nvidia-driver-pinning-590", f"nvidia-driver-pinning-{old}"]
    try:
        locked = apply(inventory, options=options)
        assert locked.returncode == 0 and not locked.errors(), locked.describe()
        for h in hosts:
            assert f"NVIDIA driver | Lock the driver to {old}" in locked.changed(h.address)
            assert versions(host_pool, h, [*DRIVER, *pins]) == {
                **dict.fromkeys(DRIVER, f"{old}-1"),
                f"nvidia-driver-pinning-{old}": f"{old}-1",
            }
            # apt itself now holds the release: its candidate is the pinned one.
            policy = host_pool.run(h, "apt-cache policy nvidia-driver-cuda").stdout
            assert f"Candidate: {old}-1" in policy, policy
        assert_second_apply_changes_nothing(inventory, *options)
        # Unset again: the branch's pin comes back; the release stays (no update unasked).
        unlocked = apply(inventory)
        assert unlocked.returncode == 0 and not unlocked.errors(), unlocked.describe()
        for h in hosts:
            assert versions(host_pool, h, [*DRIVER, *pins]) == {
                **dict.fromkeys(DRIVER, f"{old}-1"),
                "nvidia-driver-pinning-590": new,
            }
    finally:
        # Back to the branch's newest, as the other tests expect.
        for h in hosts:
            host_pool.run(
                h,
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
                "nvidia-driver-pinning-590 " + " ".join(f"{p}={new}" for p in [*DRIVER, FM]),
            )


def test_a_newer_release_of_the_branch_is_reported_then_taken_when_asked(
    host_pool, hosts, inventory, tmp_path
):
    # The hosts run 590.44.01, an older release of the pinned branch (the stand-in has both).
    old, new = "590.44.01-1", "590.48.01-1"
    for h in hosts:
        host_pool.run(
            h,
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
            + " ".join(f"{p}={old}" for p in [*DRIVER, FM]),
        )
    try:
        # Left where it is by default (no change), reported by the audit.
        apply(inventory).assert_unchanged()
        reports = tmp_path / "audit"
        audited = apply(
            inventory, "deploy/audit.py", options=("--data", f"audit_report_dir={reports}")
        )
        assert_audit_changed_nothing(audited, reports)
        for h in hosts:
            report = json.loads((reports / f"{h.address}.json").read_text())
            # The audit says which package put nvidia-smi there: Debian's compute driver.
            assert report["facts"]["driver"]["nvidia_smi_package"] == "nvidia-driver-cuda"
            findings = report["findings"]
            [update] = [f for f in findings if f["code"] == "driver-update-available"]
            assert update["level"] == "warn" and "590.48.01 on branch 590" in update["message"]

        # Asked for, the driver moves to the branch's newest; then nothing changes.
        moved = apply(inventory, options=("--data", "nvidia_driver_update_within_branch=true"))
        assert moved.returncode == 0 and not moved.errors(), moved.describe()
        for h in hosts:
            assert versions(host_pool, h, DRIVER) == dict.fromkeys(DRIVER, new)
        assert_second_apply_changes_nothing(
            inventory, "--data", "nvidia_driver_update_within_branch=true"
        )
    finally:
        # Back to the branch's newest whatever happened, as the other tests expect.
        for h in hosts:
            host_pool.run(
                h,
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                + " ".join(f"{p}={new}" for p in [*DRIVER, FM]),
            )


def test_a_kernel_installed_without_the_module_built_is_reported(
    host_pool, hosts, inventory, tmp_path
):
    # A kernel update lands (its image in /boot) and DKMS built nothing for it: the next boot
    # would have no NVIDIA module. dkms here is Debian's own; the stand-in driver packages
    # register no module with it, so `dkms status nvidia` is empty as on such a host.
    kernel = "6.1.0-99-amd64"
    for h in hosts:
        host_pool.run(h, f"mkdir -p /boot && touch /boot/vmlinuz-{kernel}")
    try:
        reports = tmp_path / "audit"
        audited = apply(
            inventory, "deploy/audit.py", options=("--data", f"audit_report_dir={reports}")
        )
        assert_audit_changed_nothing(audited, reports)
        for h in hosts:
            findings = json.loads((reports / f"{h.address}.json").read_text())["findings"]
            [missing] = [f for f in findings if f["code"] == "dkms-module-missing"]
            assert missing["level"] == "warn"
            assert f"Kernel {kernel}, the newest installed (it boots next)" in missing["message"]
    finally:
        for h in hosts:
            host_pool.run(h, f"rm -f /boot/vmlinuz-{kernel}")


def test_reboot_and_wait_returns_after_a_real_reboot(host_pool, tmp_path):
    [test_host] = host_pool.boot(1)
    inventory = write_inventory(
        tmp_path / "one.py", {"hosts": [(test_host.address, host_pool.inventory_data())]}
    )
    # PID 1's start time (clock ticks since the kernel booted) moves on when the host reboots.
    pid1_start = lambda: host_pool.run(test_host, "cut -d' ' -f22 /proc/1/stat").stdout.strip()  # noqa: E731
    before = pid1_start()
    result = apply(inventory, "roles.reboot.reboot_and_wait", "timeout=120")
    assert result.returncode == 0 and not result.errors(), result.describe()
    assert test_host.boots == 2
    assert int(pid1_start()) > int(before)
    host_pool.stop(test_host)


def fingerprint_of(public_key: Path) -> str:
    listing = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(public_key)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr"))


def test_a_keyring_that_is_not_the_pinned_one_is_never_installed(
    host_pool, nvidia_mirror, tmp_path
):
    # Before: downloaded to a predictable /tmp name (skipped when it already existed) and
    # installed unchecked; then, without a pinned sha256, given to apt-get once its first
    # key was NVIDIA's, which ran its postinst as root.
    [test_host] = host_pool.boot(1)
    try:
        host_pool.run(test_host, "apt-get -q update && apt-get install -y -q curl gnupg")
        inventory = write_inventory(
            tmp_path / "one.py", {"hosts": [(test_host.address, host_pool.inventory_data())]}
        )
        downloads = "/var/lib/pyinfra-sglang/downloads"
        keyring = (
            "roles.nvidia_repo.keyring_installed",
            "package=cuda-keyring",
            f"src={nvidia_mirror.repo_url()}cuda-keyring_1.1-1_all.deb",
            "keyring_path=/usr/share/keyrings/cuda-archive-keyring.gpg",
            f"download_dir={downloads}",
        )
        nvidia = "fingerprint=EB693B3035CD5710E231E123A4B469963BF863CC"
        # No sha256 pinned: checked by the key it carries (the stand-in's is not NVIDIA's).
        by_key = apply(inventory, *keyring, nvidia)
        assert by_key.returncode != 0, by_key.describe()
        assert "not NVIDIA's EB693B3035CD5710E231E123A4B469963BF863CC: not installing it" in (
            by_key.stderr
        ), by_key.describe()
        # A pinned sha256 that is not the file's.
        by_hash = apply(inventory, *keyring, nvidia, f"sha256={'ab' * 32}")
        assert by_hash.returncode != 0, by_hash.describe()
        assert f"expected {'ab' * 32}: not installing it" in by_hash.stderr, by_hash.describe()
        state = host_pool.run(
            test_host,
            f"dpkg -s cuda-keyring >/dev/null 2>&1 && echo installed || echo absent; "
            f"stat -c '%a %U' {downloads}; echo \"[$(ls -A {downloads})]\"; "
            "test -e /usr/share/keyrings/cuda-archive-keyring.gpg && echo key || echo no key",
        ).stdout.split("\n")
        assert state[:4] == ["absent", "700 root", "[]", "no key"], state

        # The key it expects (here the stand-in's): the key file alone is installed, dpkg
        # never sees the .deb (its postinst never runs), and nothing is left behind.
        standin = f"fingerprint={fingerprint_of(nvidia_mirror.public_key)}"
        accepted = apply(inventory, *keyring, standin)
        assert accepted.returncode == 0 and not accepted.errors(), accepted.describe()
        installed = host_pool.run(
            test_host,
            "dpkg -s cuda-keyring >/dev/null 2>&1 && echo installed || echo absent; "
            "stat -c '%a %U %G' /usr/share/keyrings/cuda-archive-keyring.gpg; "
            f'echo "[$(ls -A {downloads})] [$(ls -A /etc/apt/preferences.d)]"',
        ).stdout.split("\n")
        # Nothing else of the package: not its pin, nothing left in the download folder.
        assert installed[:3] == ["absent", "644 root root", "[] []"], installed
        key = test_host.root / "usr/share/keyrings/cuda-archive-keyring.gpg"
        assert key.read_bytes() == nvidia_mirror.public_key.read_bytes()
        again = apply(inventory, *keyring, standin)
        again.assert_unchanged()
    finally:
        host_pool.stop(test_host)


MIRROR_USER, MIRROR_PASSWORD = "mirror-user", "mirror-s3cret"


def test_a_mirrors_login_goes_to_auth_conf_never_the_list_or_a_command(
    host_pool, nvidia_mirror, tmp_path
):
    """A private mirror that asks every request for its login: apt reads it from a 0600
    file in auth.conf.d, curl (the keyring) from a netrc file removed after it; the list
    file, which every user reads, holds the URL alone."""
    from tests.hosts import aptrepo

    [test_host] = host_pool.boot(1)
    deploy = tmp_path / "nvidia_repo_only.py"
    deploy.write_text("from roles.nvidia_repo import nvidia_repo\n\nnvidia_repo()\n")
    sha256 = hashlib.sha256(
        (nvidia_mirror.root / "debian12/x86_64/cuda-keyring_1.1-1_all.deb").read_bytes()
    ).hexdigest()
    credentials = (MIRROR_USER, MIRROR_PASSWORD)
    try:
        host_pool.run(test_host, "apt-get -q update && apt-get install -y -q curl")
        with aptrepo.serve(nvidia_mirror.root, credentials=credentials) as url:
            private = url.replace("http://", f"http://{MIRROR_USER}:{MIRROR_PASSWORD}@")
            data = {
                **host_pool.inventory_data(),
                "nvidia_apt_mirror": private,
                "nvidia_keyring_sha256": sha256,
            }
            inventory = write_inventory(tmp_path / "one.py", {"hosts": [(test_host.address, data)]})
            first = apply(inventory, str(deploy))
            assert first.returncode == 0 and not first.errors(), first.describe()
            assert MIRROR_PASSWORD not in first.stdout + first.stderr
            # apt-get update succeeded against a server that refuses requests without the
            # login: apt found it in auth.conf.d.
            assert "NVIDIA repository | Refresh apt after a repository change" in first.changed(
                test_host.address
            )
            run = lambda command: host_pool.run(test_host, command).stdout  # noqa: E731
            assert run(f"cat {LIST_FILE}").splitlines()[-1] == (
                f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
                f"{url}/debian12/x86_64/ /"
            )
            auth = "/etc/apt/auth.conf.d/pyinfra-sglang-nvidia.conf"
            assert run(f"stat -c '%a %U %G' {auth}").strip() == "600 root root"
            assert run(f"cat {auth}").splitlines()[-1] == (
                f"machine {url} login {MIRROR_USER} password {MIRROR_PASSWORD}"
            )
            # Nowhere else on the host's apt configuration, nor left by curl.
            assert run(
                f"grep -rl {MIRROR_PASSWORD} /etc/apt /var/lib/pyinfra-sglang; true"
            ).split() == [auth]
            assert run("dpkg -s cuda-keyring | sed -n 's/^Status: //p'").strip() == (
                "install ok installed"
            )
            assert "nvidia-driver-pinning-590" in run("apt-cache pkgnames nvidia-driver-pinning")
            again = apply(inventory, str(deploy))
            again.assert_unchanged()
    finally:
        host_pool.stop(test_host)


MOKUTIL_STANDIN = Path(__file__).resolve().parents[1] / "hosts" / "mokutil_standin.py"


def mok_pair(folder: Path) -> tuple[Path, Path]:
    key, cert = folder / "mok.key", folder / "mok.der"
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-outform",
            "DER",
            "-out",
            str(cert),
            "-days",
            "3650",
            "-subj",
            "/CN=pyinfra-sglang test MOK/",
        ],
        check=True,
        capture_output=True,
    )
    key.chmod(0o600)
    return key, cert


def test_secure_boot_refuses_without_an_enrolled_key_then_signs_with_it(
    host_pool, hosts, inventory, tmp_path
):
    # The firmware's Secure Boot state and MOK list cannot exist in a container: the first
    # host gets a mokutil double that reports Secure Boot on (tests/hosts/mokutil_standin.py).
    secure, other = hosts
    (secure.root / "usr/local/sbin/mokutil").write_bytes(MOKUTIL_STANDIN.read_bytes())
    (secure.root / "usr/local/sbin/mokutil").chmod(0o755)
    state = secure.root / "etc/mokutil-standin"
    state.mkdir(parents=True, exist_ok=True)
    (state / "sb-state").write_text("enabled\n")
    key, cert = mok_pair(tmp_path)
    with_pair = ("--data", f"nvidia_mok_key_file={key}", "--data", f"nvidia_mok_cert_file={cert}")
    try:
        # No key pair: refused at planning, nothing changes on either host.
        refused = apply(inventory)
        assert refused.returncode != 0 and refused.logged_changes() == [], refused.describe()
        assert f"host {secure.address}: Secure Boot is on (mokutil)" in refused.stderr
        assert "nvidia_mok_key_file" in refused.stderr and "Nothing was changed" in refused.stderr

        # A pair whose key is not enrolled: refused with the steps to enroll it.
        unenrolled = apply(inventory, options=with_pair)
        assert unenrolled.returncode != 0 and unenrolled.logged_changes() == []
        assert "the nvidia_mok_cert_file key is not enrolled" in unenrolled.stderr
        assert "mokutil --import" in unenrolled.stderr

        # Enrolled: the pair goes where Debian's DKMS signs from, the key 0600.
        (state / "enrolled").write_text(hashlib.sha256(cert.read_bytes()).hexdigest() + "\n")
        signed = apply(inventory, options=with_pair)
        assert signed.returncode == 0 and not signed.errors(), signed.describe()
        put = "NVIDIA driver | Put the MOK key pair where DKMS signs the module from"
        assert put in signed.changed(secure.address)
        assert put not in signed.changed(other.address)  # Secure Boot off there
        listing = host_pool.run(
            secure, "stat -c '%a %U %n' /var/lib/dkms/mok.key /var/lib/dkms/mok.pub"
        ).stdout.split("\n")
        assert listing[:2] == [
            "600 root /var/lib/dkms/mok.key",
            "644 root /var/lib/dkms/mok.pub",
        ]
        assert (secure.root / "var/lib/dkms/mok.key").read_bytes() == key.read_bytes()
        assert (secure.root / "var/lib/dkms/mok.pub").read_bytes() == cert.read_bytes()
        # The key never reaches pyinfra's output.
        assert key.read_text().splitlines()[1] not in signed.stderr + signed.stdout
        assert_second_apply_changes_nothing(inventory, *with_pair)
    finally:
        host_pool.run(
            secure,
            "rm -rf /usr/local/sbin/mokutil /etc/mokutil-standin "
            "/var/lib/dkms/mok.key /var/lib/dkms/mok.pub",
        )


def test_a_flavor_that_cannot_run_the_gpus_found_is_refused_before_any_change(
    host_pool, hosts, inventory
):
    # The first host's GPUs are now eight RTX PRO 6000 (Blackwell, 12.0): proprietary modules
    # cannot run them. The inventory (dense-bf16: any architecture) passes validation; the
    # driver role refuses at planning, from what nvidia-smi reports.
    upgraded, other = hosts
    host_pool.run(
        upgraded,
        "mkdir -p /etc/nvidia-smi-replay "
        "&& echo rtxpro6000x8-pcie-from-smiq > /etc/nvidia-smi-replay/capture",
    )
    before = {h.address: host_pool.run(h, "dpkg-query -W").stdout for h in hosts}
    try:
        refused = apply(inventory, options=("--data", "nvidia_kernel_modules=proprietary"))
        assert refused.returncode != 0 and not refused.executed, refused.describe()
        assert refused.logged_changes() == []
        assert (
            f"host {upgraded.address}: nvidia_kernel_modules = 'proprietary' cannot run GPUs "
            "0, 1, 2, 3, 4, 5, 6, 7 (NVIDIA RTX PRO 6000 Blackwell Server Edition): "
            "proprietary kernel modules cannot run Blackwell GPUs (sm_120): they run only on "
            "NVIDIA's open modules; allowed: open" in refused.stderr
        )
        assert "Nothing was changed." in refused.stderr
        assert f"host {other.address}: nvidia_kernel_modules" not in refused.stderr  # H200s
        assert {h.address: host_pool.run(h, "dpkg-query -W").stdout for h in hosts} == before
    finally:
        host_pool.run(upgraded, "rm -f /etc/nvidia-smi-replay/capture")
