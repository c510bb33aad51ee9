"""A real Debian 12 test host uses the CUDA apt repository test double as it would NVIDIA's:
keyring .deb, signed apt-get update, driver pinning, and the nvidia-smi replay double."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.hosts

LIST_FILE = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
NVIDIA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
APT_GET = "DEBIAN_FRONTEND=noninteractive apt-get -y -q"
# Only the CUDA source: the test proves this repo works, not that deb.debian.org is up.
UPDATE_CUDA_ONLY = (
    f"{APT_GET} update -o Dir::Etc::SourceList={LIST_FILE} -o Dir::Etc::SourceParts=- "
    "-o APT::Get::List-Cleanup=0"
)


@pytest.fixture
def host(host_pool):
    [test_host] = host_pool.boot(1)
    yield test_host
    host_pool.stop(test_host)


def candidate(host_pool, host, package: str) -> str:
    policy = host_pool.run(host, f"apt-cache policy {package}").stdout
    match = re.search(r"^\s*Candidate: (\S+)$", policy, re.MULTILINE)
    assert match, policy
    return match.group(1)


def installed(host_pool, host, pattern: str) -> list[str]:
    query = f"dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}}\\n' '{pattern}'"
    lines = host_pool.run(host, query, check=False).stdout.splitlines()
    return [line.split()[-1] for line in lines if line.startswith("ii ")]


def download(host_pool, host, url: str, dest: str) -> None:
    # A fresh host has no curl or wget; python3 is there.
    fetch = f"import urllib.request; urllib.request.urlretrieve('{url}', '{dest}')"
    host_pool.run(host, f'python3 -c "{fetch}"')


def test_host_installs_the_driver_from_the_signed_mirror(host_pool, host, nvidia_mirror):
    run = host_pool.run
    download(host_pool, host, f"{nvidia_mirror.repo_url()}cuda-keyring_1.1-1_all.deb", "/tmp/k.deb")
    run(host, "dpkg -i /tmp/k.deb")
    assert f"{NVIDIA_REPO} /" in run(host, f"cat {LIST_FILE}").stdout  # as NVIDIA's package has it

    def use_mirror(keyring: str) -> None:
        line = f"deb [signed-by={keyring}] {nvidia_mirror.repo_url()} /"
        run(host, f"echo '{line}' > {LIST_FILE}")

    # A key that did not sign the repo must make apt refuse it: signatures really are checked.
    use_mirror("/usr/share/keyrings/debian-archive-keyring.gpg")
    refused = run(host, UPDATE_CUDA_ONLY, check=False)
    assert refused.returncode != 0 and "NO_PUBKEY" in refused.stderr, refused.stderr

    use_mirror(KEYRING)
    update = run(host, UPDATE_CUDA_ONLY, check=False)
    assert update.returncode == 0, update.stderr
    assert not re.search(r"^(W|E):", update.stderr, re.MULTILINE), update.stderr

    run(host, f"{APT_GET} install nvidia-driver-pinning-590")
    assert installed(host_pool, host, "nvidia-driver-pinning-*") == ["nvidia-driver-pinning-590"]
    assert candidate(host_pool, host, "nvidia-driver-cuda") == "590.48.01-1"

    # Debian's compute driver, by Debian's name: it carries nvidia-smi.
    run(host, f"{APT_GET} install nvidia-driver-cuda")
    assert run(host, "nvidia-smi -L").stdout.splitlines() == [
        "GPU 0: NVIDIA H200 (UUID: GPU-319db826-c017-8cd5-c88f-5335bdd0434f)",
        "GPU 1: NVIDIA H200 (UUID: GPU-d211c608-cc53-3779-adca-bf0c0c3379fb)",
    ]
    assert run(host, "dpkg-query -W -f '${Version}' nvidia-driver-cuda").stdout == "590.48.01-1"
    assert run(host, "dpkg -S /usr/bin/nvidia-smi").stdout.split(":")[0] == "nvidia-driver-cuda"

    # The 595 pin replaces the 590 one through Conflicts, and its pin file goes with it.
    run(host, f"{APT_GET} install nvidia-driver-pinning-595")
    assert installed(host_pool, host, "nvidia-driver-pinning-*") == ["nvidia-driver-pinning-595"]
    # cuda-keyring's own pin file (dpkg -i above) stays; the driver pin file (every pinning
    # package ships the one name, as NVIDIA's do) now pins branch 595.
    assert run(host, "ls /etc/apt/preferences.d/").stdout.split() == [
        "cuda-repository-pin-600",
        "nvidia-driver-pin",
    ]
    assert "Pin: version 595." in run(host, "cat /etc/apt/preferences.d/nvidia-driver-pin").stdout
    assert candidate(host_pool, host, "nvidia-driver-cuda") == "595.58.03-1"
