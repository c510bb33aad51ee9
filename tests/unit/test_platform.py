"""Supported platforms map to NVIDIA's repository names; others are refused clearly."""

import pytest

from pyinfra_sglang.driver.platform import UnsupportedPlatformError, resolve_platform


@pytest.mark.parametrize(
    ("distro", "version", "machine", "repo", "arch", "components"),
    [
        ("ubuntu", "22.04", "x86_64", "ubuntu2204", "x86_64", ()),
        ("ubuntu", "24.04", "aarch64", "ubuntu2404", "sbsa", ()),
        ("debian", "12", "x86_64", "debian12", "x86_64", ("contrib",)),
        ("debian", "12", "aarch64", "debian12", "sbsa", ("contrib",)),
    ],
)
def test_supported_platforms(distro, version, machine, repo, arch, components):
    platform = resolve_platform("gpu1", {"ID": distro, "VERSION_ID": version}, machine)
    assert (platform.nvidia_repo, platform.nvidia_arch, platform.components) == (
        repo,
        arch,
        components,
    )


def test_unsupported_distro_names_host_distro_and_what_is_supported():
    release = {"ID": "rocky", "VERSION_ID": "9.4", "PRETTY_NAME": "Rocky Linux 9.4 (Blue Onyx)"}
    with pytest.raises(UnsupportedPlatformError) as caught:
        resolve_platform("gpu7", release, "x86_64")
    message = str(caught.value)
    assert message.startswith("host gpu7: unsupported distro Rocky Linux 9.4 (Blue Onyx)")
    assert "ID=rocky VERSION_ID=9.4" in message
    assert "supported: ubuntu 22.04, ubuntu 24.04, debian 12" in message


def test_unsupported_ubuntu_release_is_refused():
    with pytest.raises(UnsupportedPlatformError, match="ubuntu 20.04"):
        resolve_platform("gpu1", {"ID": "ubuntu", "VERSION_ID": "20.04"}, "x86_64")


def test_unsupported_arch_is_refused():
    with pytest.raises(UnsupportedPlatformError) as caught:
        resolve_platform("gpu1", {"ID": "debian", "VERSION_ID": "12"}, "ppc64le")
    assert "unsupported architecture 'ppc64le'" in str(caught.value)
    assert "supported: x86_64, aarch64" in str(caught.value)
