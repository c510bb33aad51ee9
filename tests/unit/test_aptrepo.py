"""The CUDA apt repository test double: packages, indexes, signatures, and the two doubles
(nvidia-smi replay, nvcc) it ships, checked with dpkg-deb and gpgv as apt would see them."""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pyinfra_sglang import data
from tests.hosts import aptrepo
from tests.hosts.nvidia_smi_replay import find_block

CAPTURE = aptrepo.GPU_FIXTURES / "h200x2-nvlink-vm"
QUERY_GPU = (
    "--query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
    "persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm"
)

missing = [tool for tool in ("dpkg-deb", "gpg", "gpgv") if not shutil.which(tool)]
pytestmark = pytest.mark.skipif(
    bool(missing), reason=f"needs {', '.join(missing)} (apt-get install dpkg gpg gpgv)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> aptrepo.BuiltRepo:
    return aptrepo.build_repo(
        tmp_path_factory.mktemp("cuda-repo"),
        targets=[("debian12", "x86_64"), ("ubuntu2404", "sbsa")],
    )


@pytest.fixture(scope="module")
def repo(built) -> Path:
    return built.repo("debian12", "x86_64")


def control_field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def extract(deb: Path, into: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    return into


def stanzas(packages_text: str) -> list[dict[str, str]]:
    result = []
    for block in packages_text.strip().split("\n\n"):
        result.append(dict(line.split(": ", 1) for line in block.splitlines()))
    return result


D580, D590, D595 = "580.126.20-1", "590.48.01-1", "595.58.03-1"
PIN = "nvidia-driver-pinning"
# Every pin of the stand-in: the branches', then each release's exact-version one.
PINS = ("580", "590", "595", "580.126.20", "590.44.01", "590.48.01", "595.58.03")


def _pins_but(track: str) -> str:
    """One pin's Conflicts: every other pin (the real ones conflict through the virtual
    nvidia-driver-pinning; tests/hosts/aptrepo.py names them)."""
    return ", ".join(f"{PIN}-{other}" for other in PINS if other != track)


# deb file -> its relationship fields; a field not named must be absent. Package, Version and
# Architecture are checked against the file name. Debian 12: Debian's names
# (tests/fixtures/nvidia-repo/shapes.toml), metapackages depending with >= as NVIDIA's do.
RELATIONS = {
    "cuda-keyring_1.1-1_all.deb": {},
    f"{PIN}-580_{D580}_all.deb": {"Conflicts": _pins_but("580"), "Provides": PIN},
    f"{PIN}-590_{D590}_all.deb": {"Conflicts": _pins_but("590"), "Provides": PIN},
    f"{PIN}-595_{D595}_all.deb": {"Conflicts": _pins_but("595"), "Provides": PIN},
    f"{PIN}-590.44.01_590.44.01-1_all.deb": {"Conflicts": _pins_but("590.44.01"), "Provides": PIN},
    f"nvidia-driver-cuda_{D590}_amd64.deb": {"Conflicts": "nvidia-smi"},
    f"nvidia-kernel-open-dkms_{D595}_amd64.deb": {
        "Depends": "dkms",
        "Conflicts": "nvidia-kernel-dkms",
    },
    f"nvidia-kernel-dkms_{D580}_amd64.deb": {
        "Depends": "dkms",
        "Conflicts": "nvidia-kernel-open-dkms",
    },
    f"nvidia-persistenced_{D590}_amd64.deb": {},
    f"nvidia-open_{D590}_amd64.deb": {
        "Depends": (
            "nvidia-driver-cuda (>= 590), nvidia-kernel-open-dkms (>= 590), "
            "nvidia-persistenced (>= 590)"
        ),
        "Conflicts": "cuda-drivers",
    },
    f"cuda-drivers_{D595}_amd64.deb": {
        "Depends": (
            "nvidia-driver-cuda (>= 595), nvidia-kernel-dkms (>= 595), nvidia-persistenced (>= 595)"
        ),
        "Conflicts": "nvidia-open",
    },
    "cuda-nvcc-13-1_13.1.80-1_amd64.deb": {},
    "cuda-toolkit-13-1_13.1.0-1_amd64.deb": {"Depends": "cuda-nvcc-13-1 (>= 13.1.80)"},
    "cuda-13-1_13.1.0-1_amd64.deb": {"Depends": "cuda-toolkit-13-1 (= 13.1.0-1), cuda-drivers"},
    "cuda-nvcc-13-0_13.0.88-1_amd64.deb": {},
    "cuda-toolkit-13-0_13.0.0-1_amd64.deb": {"Depends": "cuda-nvcc-13-0 (>= 13.0.88)"},
}


@pytest.mark.parametrize(("deb", "relations"), RELATIONS.items(), ids=list(RELATIONS))
def test_control_fields(repo, deb, relations):
    name, version, arch = deb.removesuffix(".deb").split("_")
    expected = {"Package": name, "Version": version, "Architecture": arch}
    expected |= {field: relations.get(field, "") for field in ("Depends", "Conflicts", "Provides")}
    assert {field: control_field(repo / deb, field) for field in expected} == expected


def test_debian_has_none_of_ubuntus_names(repo):
    # Before: one list of names for every distro, so Debian hosts got Ubuntu's.
    names = {deb.name.split("_")[0] for deb in repo.glob("*.deb")}
    assert not names & {"libnvidia-compute", "nvidia-dkms-open", "nvidia-dkms", "nvidia-utils"}


def test_ubuntu_names_carry_the_branch_up_to_580_only(built):
    repo = built.repo("ubuntu2404", "sbsa")
    names = {tuple(deb.name.split("_")[:2]) for deb in repo.glob("*.deb")}
    assert ("libnvidia-compute-580", "580.126.20-1") in names
    assert ("nvidia-dkms-580-open", "580.126.20-1") in names
    assert ("libnvidia-compute", D590) in names and ("nvidia-open", D595) in names
    assert not any(name.endswith(("-590", "-595")) and PIN not in name for name, _ in names)
    utils = control_field(repo / "nvidia-utils-580_580.126.20-1_arm64.deb", "Depends")
    assert utils == "libnvidia-compute-580 (>= 580)"


def test_pinning_packages_pin_every_driver_package_to_their_branch(repo, tmp_path):
    names = (
        "nvidia-driver-cuda nvidia-kernel-open-dkms nvidia-kernel-dkms nvidia-persistenced "
        "nvidia-open cuda-drivers"
    )
    for branch, version in (("580", D580), ("590", D590), ("595", D595)):
        tree = extract(repo / f"{PIN}-{branch}_{version}_all.deb", tmp_path / branch)
        preferences = (tree / "etc/apt/preferences.d/nvidia-driver-pin").read_text()
        assert preferences == f"Package: {names}\nPin: version {branch}.*\nPin-Priority: 1000\n"


def test_keyring_package_ships_the_signing_key_and_nvidias_source(built, repo, tmp_path):
    tree = extract(repo / "cuda-keyring_1.1-1_all.deb", tmp_path)
    assert (
        tree / "usr/share/keyrings/cuda-archive-keyring.gpg"
    ).read_bytes() == built.public_key.read_bytes()
    assert (tree / "etc/apt/sources.list.d/cuda-debian12-x86_64.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n"
    )
    # Binary, not armored: apt's signed-by= reads either, but NVIDIA ships binary.
    assert not built.public_key.read_bytes().startswith(b"-----BEGIN")
    # The rest of what NVIDIA's holds (`dpkg -L cuda-keyring`): a pin, a changelog, and a
    # postinst, which is why the role without a pinned sha256 never lets dpkg install it.
    assert (tree / "etc/apt/preferences.d/cuda-repository-pin-600").is_file()
    assert (tree / "usr/share/doc/cuda-keyring/changelog.Debian.gz").is_file()
    info = subprocess.run(
        ["dpkg-deb", "-I", str(repo / "cuda-keyring_1.1-1_all.deb")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "postinst" in info


def test_driver_packages_ship_their_files(repo, tmp_path):
    extract(repo / "nvidia-driver-cuda_590.48.01-1_amd64.deb", tmp_path)
    extract(repo / "nvidia-kernel-open-dkms_590.48.01-1_amd64.deb", tmp_path)
    extract(repo / "nvidia-persistenced_590.48.01-1_amd64.deb", tmp_path)
    assert (tmp_path / "usr/lib/x86_64-linux-gnu/libcuda.so.590.48.01").is_file()
    assert (tmp_path / "usr/bin/nvidia-smi").is_file()  # Debian's compute driver ships it
    dkms = (tmp_path / "usr/src/nvidia-590.48.01/dkms.conf").read_text()
    assert 'PACKAGE_NAME="nvidia"' in dkms and 'PACKAGE_VERSION="590.48.01"' in dkms
    service = (tmp_path / "usr/lib/systemd/system/nvidia-persistenced.service").read_text()
    for line in (
        "Type=simple",
        "ExecStart=/usr/bin/nvidia-persistenced --verbose",
        "WantedBy=multi-user.target",
    ):
        assert line in service.splitlines()
    daemon = tmp_path / "usr/bin/nvidia-persistenced"
    assert daemon.stat().st_mode & 0o777 == 0o755
    # It stays in the foreground whatever its arguments, as Type=simple needs.
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([str(daemon), "--verbose"], check=False, timeout=0.5)
    for deb in repo.glob("*.deb"):
        if deb.name.startswith("cuda-keyring_"):
            continue  # NVIDIA's carries a postinst, and so does its stand-in
        info = subprocess.run(
            ["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True
        )
        listing = subprocess.run(
            ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
        )
        # The package with nvidia-smi records its release as loaded where a test asks for it
        # (aptrepo.LOAD_ON_INSTALL); no other has a maintainer script.
        ships_smi = "./usr/bin/nvidia-smi\n" in listing.stdout
        assert ("postinst" in info.stdout) == ships_smi, deb.name


def test_other_distros_and_sbsa(built, tmp_path):
    repo = built.repo("ubuntu2404", "sbsa")
    assert (
        control_field(repo / "libnvidia-compute_595.58.03-1_arm64.deb", "Architecture") == "arm64"
    )
    assert "Architectures: arm64\n" in (repo / "Release").read_text()
    extract(repo / "libnvidia-compute_595.58.03-1_arm64.deb", tmp_path)
    extract(repo / "cuda-keyring_1.1-1_all.deb", tmp_path)
    assert (tmp_path / "usr/lib/aarch64-linux-gnu/libcuda.so.595.58.03").is_file()
    assert (
        "/repos/ubuntu2404/sbsa/ /"
        in (tmp_path / "etc/apt/sources.list.d/cuda-ubuntu2404-sbsa.list").read_text()
    )
    with pytest.raises(ValueError, match="unknown distro"):
        aptrepo.package_specs("debian11", "x86_64", b"")


def test_packages_index_lists_every_deb_with_its_hashes(repo):
    entries = stanzas((repo / "Packages").read_text())
    assert sorted(e["Filename"] for e in entries) == sorted(
        f"./{deb.name}" for deb in repo.glob("*.deb")
    )
    # keyring, a pin per branch and per release, 6 driver packages per release (Debian's
    # names: 580, two of 590, 595), nvidia-fabricmanager per release, DCGM 4 for CUDA 12 and
    # 13, its exporter, CUDA x2
    assert len(entries) == 1 + 3 + 4 + 6 * 4 + 4 + 2 + 1 + 3 * 2
    for entry in entries:
        data = (repo / entry["Filename"]).read_bytes()
        assert entry["SHA256"] == hashlib.sha256(data).hexdigest()
        assert entry["MD5sum"] == hashlib.md5(data).hexdigest()
        assert int(entry["Size"]) == len(data)
        assert control_field(repo / entry["Filename"], "Version") == entry["Version"]
    assert (repo / "cuda-keyring_1.1-1_all.deb").is_file()  # the name users download


def test_release_covers_the_indexes(repo):
    release = (repo / "Release").read_text()
    assert "\nDate: " in release and "\nArchitectures: amd64\n" in release
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}\n" in release
        assert f" {hashlib.md5(data).hexdigest()} {len(data)} {name}\n" in release


def gpgv(built, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["gpgv", "--keyring", str(built.public_key), *map(str, files)],
        check=False,
        capture_output=True,
        text=True,
    )


def test_release_is_signed_by_the_keyring_key(built, repo, tmp_path):
    assert gpgv(built, repo / "InRelease").returncode == 0
    assert gpgv(built, repo / "Release.gpg", repo / "Release").returncode == 0
    assert (repo / "Release.gpg").read_text().startswith("-----BEGIN PGP SIGNATURE-----")

    tampered = tmp_path / "InRelease"
    tampered.write_text(
        (repo / "InRelease").read_text().replace("Architectures: amd64", "Architectures: i386")
    )
    assert gpgv(built, tampered).returncode != 0
    tampered_release = tmp_path / "Release"
    tampered_release.write_text((repo / "Release").read_text() + "Suite: stable\n")
    assert gpgv(built, repo / "Release.gpg", tampered_release).returncode != 0


def test_each_build_signs_with_a_new_key(built, tmp_path):
    other = aptrepo.build_repo(tmp_path / "other")
    assert other.public_key.read_bytes() != built.public_key.read_bytes()
    assert gpgv(built, other.repo() / "InRelease").returncode != 0


@pytest.mark.parametrize(
    ("package", "release", "version"),
    [
        ("cuda-nvcc-13-0_13.0.88-1_amd64.deb", "13.0", "V13.0.88"),
        ("cuda-nvcc-13-1_13.1.80-1_amd64.deb", "13.1", "V13.1.80"),
    ],
)
def test_nvcc_prints_the_real_banner_format(repo, tmp_path, package, release, version):
    tree = extract(repo / package, tmp_path)
    nvcc = tree / f"usr/local/cuda-{release}/bin/nvcc"
    result = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True)
    banner = result.stdout.splitlines()
    assert len(banner) == 5
    assert banner[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
    assert banner[3] == f"Cuda compilation tools, release {release}, {version}"
    assert banner[4].startswith(f"Build cuda_{release}.r{release}/compiler.") and banner[
        4
    ].endswith("_0")
    assert (tree / f"usr/local/cuda-{release}/lib64/libcudart.so.13").is_file()
    if release == "13.0":  # the captured banner, verbatim
        recorded, _ = find_block((CAPTURE / "smi.txt").read_bytes(), "nvcc --version")
        assert result.stdout.encode() == recorded


@pytest.fixture(scope="module")
def utils_tree(repo, tmp_path_factory) -> Path:
    return extract(
        repo / "nvidia-driver-cuda_590.48.01-1_amd64.deb",
        tmp_path_factory.mktemp("nvidia-driver-cuda"),
    )


def nvidia_smi(tree: Path, *args: str) -> subprocess.CompletedProcess:
    # Run as installed: through its shebang, with the system python3.
    return subprocess.run(
        [str(tree / "usr/bin/nvidia-smi"), *args],
        check=False,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "NVIDIA_SMI_REPLAY_ROOT": str(tree)},
    )


@pytest.mark.parametrize(
    "args",
    [("-L",), ("topo", "-m"), (QUERY_GPU, "--format=csv"), ()],
    ids=["-L", "topo -m", "query-gpu", "bare"],
)
def test_nvidia_smi_replays_captured_blocks(utils_tree, args):
    result = nvidia_smi(utils_tree, *args)
    recorded, rc = find_block((CAPTURE / "smi.txt").read_bytes(), " ".join(["nvidia-smi", *args]))
    assert (result.stdout, result.returncode, result.stderr) == (recorded, rc, b"")


def test_nvidia_smi_replay_outputs(utils_tree):
    listing = nvidia_smi(utils_tree, "-L").stdout.decode().splitlines()
    assert listing == [
        "GPU 0: NVIDIA H200 (UUID: GPU-319db826-c017-8cd5-c88f-5335bdd0434f)",
        "GPU 1: NVIDIA H200 (UUID: GPU-d211c608-cc53-3779-adca-bf0c0c3379fb)",
    ]
    topo = nvidia_smi(utils_tree, "topo", "-m").stdout.decode()
    assert "\x1b[4mGPU0\tGPU1" in topo and "GPU0\t X \tNV18" in topo
    query = nvidia_smi(utils_tree, QUERY_GPU, "--format=csv").stdout.decode().splitlines()
    assert query[1].startswith(
        "0, NVIDIA H200, 00000000:00:06.0, 580.159.04, 5, 5, 5, [N/A], 16, 16,"
    )
    assert nvidia_smi(utils_tree, "-q").stdout == (CAPTURE / "smi_q.txt").read_bytes()
    assert nvidia_smi(utils_tree, "-q", "-x").stdout == (CAPTURE / "smi_q.xml").read_bytes()


@pytest.mark.parametrize(
    "args", [("--bogus",), ("-L", "extra"), ("cat", "/proc/driver/nvidia/version")]
)
def test_nvidia_smi_refuses_what_was_not_captured(utils_tree, args):
    result = nvidia_smi(utils_tree, *args)
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"no recorded output" in result.stderr


def test_nvidia_smi_uses_the_capture_the_host_names(utils_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(utils_tree, tree)
    degraded = tree / "usr/share/nvidia-smi-replay/degraded"
    degraded.mkdir()
    (degraded / "smi.txt").write_text(
        "### nvidia-smi -L\nGPU 0: NVIDIA H200 (UUID: GPU-x)\n### rc=0\n"
    )
    (tree / "etc/nvidia-smi-replay").mkdir(parents=True)
    (tree / "etc/nvidia-smi-replay/capture").write_text("degraded\n")
    assert nvidia_smi(tree, "-L").stdout == b"GPU 0: NVIDIA H200 (UUID: GPU-x)\n"
    assert nvidia_smi(tree, "topo", "-m").returncode == 2  # not in this capture


def test_serve_serves_the_tree_quietly(repo, built, capfd):
    with aptrepo.serve(built.root) as url:
        assert url.startswith("http://127.0.0.1:") and not url.endswith("/")
        with urllib.request.urlopen(f"{url}/debian12/x86_64/InRelease") as response:
            assert response.read() == (repo / "InRelease").read_bytes()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}/debian12/x86_64/missing")
    assert capfd.readouterr().err == ""


def test_exact_version_pins_pin_one_release_and_swap_with_every_other_pin(repo, tmp_path):
    # NVIDIA's nvidia-driver-pinning-<version>: "Pin: version <version>-*" at 1000 (README.md).
    names = (
        "nvidia-driver-cuda nvidia-kernel-open-dkms nvidia-kernel-dkms nvidia-persistenced "
        "nvidia-open cuda-drivers"
    )
    deb = repo / f"{PIN}-590.44.01_590.44.01-1_all.deb"
    tree = extract(deb, tmp_path / "exact")
    # NVIDIA's file name: apt ignores a preferences.d file with an extension (".01") but .pref.
    preferences = (tree / "etc/apt/preferences.d/nvidia-driver-pin").read_text()
    assert preferences == f"Package: {names}\nPin: version 590.44.01-*\nPin-Priority: 1000\n"
    assert control_field(deb, "Provides") == "nvidia-driver-pinning"
    conflicts = control_field(deb, "Conflicts").split(", ")
    assert f"{PIN}-590" in conflicts and f"{PIN}-590.48.01" in conflicts
    assert f"{PIN}-590.44.01" not in conflicts
    assert "driver version 590.44.01" in control_field(deb, "Description")


def test_fabric_manager_stands_in_at_every_driver_release(repo):
    entries = stanzas((repo / "Packages").read_text())
    releases = sorted(e["Version"] for e in entries if e["Package"] == "nvidia-fabricmanager")
    assert releases == sorted(v for vs in aptrepo.DRIVER_RELEASES.values() for v in vs)


def test_the_dcgm_exporter_ships_its_real_files_and_serves_its_counters(repo, tmp_path):
    settings = data.monitoring().dcgm_exporter
    deb = repo / f"{settings.package}_{aptrepo.DCGM_EXPORTER_VERSION}_amd64.deb"
    tree = extract(deb, tmp_path / "tree")
    listed = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    for path in (
        settings.binary,
        settings.unit,
        "/etc/dcgm-exporter/default-counters.csv",
        "/etc/dcgm-exporter/dcp-metrics-included.csv",
        "/etc/dcgm-exporter/1.x-compatibility-metrics.csv",
    ):
        assert f" .{path}\n" in listed, path
    unit = (tree / settings.unit.lstrip("/")).read_text().splitlines()
    assert f"ExecStart={settings.binary} -f {settings.counters}" in unit
    assert "Wants=nvidia-dcgm.service" in unit and "WantedBy=multi-user.target" in unit
    counters = tree / settings.counters.lstrip("/")
    fields = [line.split(",")[0] for line in counters.read_text().splitlines() if line[:1] != "#"]
    assert fields == list(settings.default_counters)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(tree / settings.binary.lstrip("/")), "-f", str(counters), "-a", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stderr is not None
        assert b"listening on" in server.stderr.readline()  # ready: it says so once bound
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            page = answer.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=5)
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" in page
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter" in page
    temp = next(line for line in page.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert 'gpu="0"' in temp and 'UUID="GPU-' in temp and 'device="nvidia0"' in temp
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in page  # commented out: not collected
