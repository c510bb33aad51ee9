"""The cuda-keyring .deb without a pinned sha256: the role's shell check (roles/nvidia_repo.py
keyring_unpacked) run by sh on real .deb files built here, hostile ones among them. dpkg never
sees such a .deb (NVIDIA's carries a postinst, which dpkg would run as root): the check
unpacks it, and only a package of a keyring's files whose key file holds exactly one key,
NVIDIA's, gets its key file installed."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from pyinfra_sglang import data
from roles.nvidia_repo import installed_keys_command, keyring_unpacked
from tests.hosts import aptrepo

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("dpkg-deb", "gpg", "tar")),
    reason="needs dpkg-deb, gpg and tar",
)

KEYRING_PATH = aptrepo.KEYRING_PATH
ALLOWED = [
    path.format(distro="debian12", arch="x86_64") for path in data.nvidia().repo.keyring_deb_files
]


@dataclasses.dataclass(frozen=True)
class Keys:
    nvidia: bytes  # stands for NVIDIA's key: the fingerprint the check expects
    nvidia_fingerprint: str
    other: bytes
    other_fingerprint: str


@pytest.fixture(scope="module")
def keys() -> Keys:
    with aptrepo.SigningKey() as nvidia, aptrepo.SigningKey() as other:
        return Keys(nvidia.public_key(), nvidia.fingerprint, other.public_key(), other.fingerprint)


def build(tmp_path: Path, spec: aptrepo.PackageSpec) -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return aptrepo.build_deb(spec, out, work)


def keyring_spec(key: bytes, key_file: bytes | None = None, **changes) -> aptrepo.PackageSpec:
    """The stand-in repository's cuda-keyring (NVIDIA's shape: key, list, pin, changelog,
    postinst) carrying ``key`` (or ``key_file`` as its key file), with ``changes``."""
    spec = aptrepo.keyring_package("debian12", "x86_64", key)
    if key_file is not None:
        files = tuple(
            aptrepo.DebFile(KEYRING_PATH, key_file) if f.path == KEYRING_PATH else f
            for f in spec.files
        )
        spec = dataclasses.replace(spec, files=files)
    return dataclasses.replace(spec, **changes)


def check(tmp_path: Path, deb: Path, fingerprint: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the check on a copy of ``deb`` in a root-only folder, as the role does."""
    downloads = tmp_path / "downloads"
    downloads.mkdir(mode=0o700)
    copy = downloads / "cuda-keyring.deb"
    shutil.copy(deb, copy)
    folder = downloads / "cuda-keyring.d"
    script = keyring_unpacked(str(copy), str(folder), fingerprint, KEYRING_PATH, ALLOWED)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    return done, downloads


def assert_refused(done: subprocess.CompletedProcess, downloads: Path, why: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert why in done.stderr and "not installing it" in done.stderr, done.stderr
    assert list(downloads.iterdir()) == []  # the .deb and what was unpacked are gone


def test_nvidias_shape_with_its_postinst_passes_and_no_script_runs(keys, tmp_path):
    marker = tmp_path / "postinst-ran"
    deb = build(
        tmp_path,
        keyring_spec(keys.nvidia, scripts=(("postinst", aptrepo.script(f"touch {marker}\n")),)),
    )
    done, downloads = check(tmp_path, deb, keys.nvidia_fingerprint)
    assert done.returncode == 0, done.stderr
    key = downloads / "cuda-keyring.d" / "root" / KEYRING_PATH.lstrip("/")
    assert key.read_bytes() == keys.nvidia
    assert not marker.exists()  # unpacked, never installed: the postinst never ran


def test_a_keyring_with_a_second_key_is_refused(keys, tmp_path):
    both = keys.nvidia + keys.other
    deb = build(
        tmp_path,
        keyring_spec(keys.nvidia, key_file=both),
    )
    done, downloads = check(tmp_path, deb, keys.nvidia_fingerprint)
    assert_refused(
        done,
        downloads,
        f"carries 2 keys ({keys.nvidia_fingerprint} {keys.other_fingerprint}), not only "
        f"NVIDIA's {keys.nvidia_fingerprint}",
    )


def test_a_keyring_with_another_key_is_refused(keys, tmp_path):
    deb = build(tmp_path, keyring_spec(keys.other))
    done, downloads = check(tmp_path, deb, keys.nvidia_fingerprint)
    assert_refused(
        done,
        downloads,
        f"carries key {keys.other_fingerprint}, not NVIDIA's {keys.nvidia_fingerprint}",
    )
    assert "pin nvidia_keyring_sha256" in done.stderr


@pytest.mark.parametrize(
    "extra",
    ["/etc/cron.d/x", "/usr/bin/cuda-helper", "/etc/apt/sources.list.d/other.list"],
)
def test_a_keyring_with_a_file_no_keyring_holds_is_refused(keys, tmp_path, extra):
    spec = keyring_spec(keys.nvidia)
    deb = build(
        tmp_path,
        dataclasses.replace(
            spec, files=(*spec.files, aptrepo.DebFile(extra, b"* * * * * root x\n"))
        ),
    )
    done, downloads = check(tmp_path, deb, keys.nvidia_fingerprint)
    assert_refused(done, downloads, "holds what a keyring does not: ")
    assert f" .{extra}: not installing it" in done.stderr  # named, its new folders beside it


def test_a_keyring_without_its_key_file_or_with_no_key_is_refused(keys, tmp_path):
    no_key = build(
        tmp_path,
        keyring_spec(keys.nvidia, key_file=b"not a key\n"),
    )
    done, downloads = check(tmp_path, no_key, keys.nvidia_fingerprint)
    assert_refused(done, downloads, f"carries key none, not NVIDIA's {keys.nvidia_fingerprint}")


def test_a_key_file_that_is_a_symlink_is_refused(keys, tmp_path):
    # A symlink where the key file belongs would install whatever it points at.
    stage = tmp_path / "stage"
    (stage / "DEBIAN").mkdir(parents=True)
    (stage / "DEBIAN" / "control").write_text(keyring_spec(keys.nvidia).control())
    target = stage / KEYRING_PATH.lstrip("/")
    target.parent.mkdir(parents=True)
    target.symlink_to("/etc/shadow")
    deb = tmp_path / "cuda-keyring.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(stage), str(deb)],
        check=True,
        capture_output=True,
    )
    done, downloads = check(tmp_path, deb, keys.nvidia_fingerprint)
    assert_refused(done, downloads, f"has no plain file {KEYRING_PATH}")


def test_what_is_not_a_deb_is_refused(keys, tmp_path):
    page = tmp_path / "login.html"
    page.write_text("<html>please log in</html>\n")
    done, downloads = check(tmp_path, page, keys.nvidia_fingerprint)
    assert_refused(done, downloads, "the downloaded keyring is not a readable .deb")


def test_the_installed_key_file_is_read_by_its_primary_keys(keys, tmp_path):
    def listed(path: Path) -> list[str]:
        done = subprocess.run(
            ["sh", "-c", installed_keys_command(str(path))],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()

    one, two = tmp_path / "one.gpg", tmp_path / "two.gpg"
    one.write_bytes(keys.nvidia)
    two.write_bytes(keys.nvidia + keys.other)
    assert listed(one) == [keys.nvidia_fingerprint]
    assert listed(two) == [keys.nvidia_fingerprint, keys.other_fingerprint]
    assert listed(tmp_path / "absent.gpg") == []
