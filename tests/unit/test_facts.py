"""Fact parsers on output captured from real hosts (tests/fixtures/facts/)."""

from pathlib import Path

import pytest
from pyinfra.context import ctx_host, ctx_state

from checks.facts import (
    AptPolicy,
    AptSourceEntries,
    FileDigests,
    FirstLine,
    HttpStatus,
    KernelHeaders,
    MemoryInfo,
    MokEnrolled,
    NvccRelease,
    NvidiaGpus,
    NvidiaLoadedModule,
    NvidiaP2P,
    NvidiaSmiPackage,
    NvidiaTopology,
    PythonPackages,
    PythonVersion,
    SnapshotDamage,
    Virtualization,
)
from pyinfra_sglang.audit.gpu_load import sampled_load_command
from pyinfra_sglang.parsers.files import (
    count_gpu_classes,
    parse_counts,
    parse_first_nonempty,
    parse_last_int,
    parse_sized_files,
    parse_venvs_by_age,
)
from tests.unit.captures import captured_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_virtualization_in_a_container_inside_a_vm():
    fact = Virtualization().process(lines("virtualization_nspawn_in_firecracker.txt"))
    assert fact == {"container": "systemd-nspawn", "vm": "kvm"}


def test_virtualization_on_bare_metal():
    # systemd-detect-virt prints "none" for each question on bare metal.
    assert Virtualization().process(["none", "none"]) == {"container": None, "vm": None}


def test_virtualization_without_systemd_detect_virt():
    assert Virtualization().process(["unknown", "unknown"]) == {
        "container": "unknown",
        "vm": "unknown",
    }
    # No systemd-detect-virt in the H200 Firecracker VM; its CPU flags name a hypervisor.
    assert Virtualization().process(["unknown", "hypervisor"]) == {
        "container": "unknown",
        "vm": "hypervisor",
    }


def test_kernel_headers_the_distro_does_not_ship():
    fact = KernelHeaders().process(lines("kernel_headers_nspawn_in_firecracker.txt"))
    assert fact == {
        "kernel_release": "6.18.44-fc-v657",
        "package": "linux-headers-6.18.44-fc-v657",
        "installed": False,
        "candidate": None,
        "apt_lists_present": True,
    }


def test_kernel_headers_installed_asks_apt_nothing():
    # apt-cache costs about a second of CPU a call: an installed package needs no candidate.
    fact = KernelHeaders().process(
        ["6.1.0-28-amd64", "linux-headers-amd64", "installed"]
        + [
            "(not asked)",
            "lists",
        ]
    )
    assert fact["installed"] and fact["candidate"] is None
    command = KernelHeaders().command("linux-headers-{flavor}")
    assert command.index("then echo installed; echo '(not asked)'") < command.index("apt-cache")


def test_kernel_headers_command_uses_the_running_kernel():
    # The template's text quoted, the release the shell read from uname put in.
    command = KernelHeaders().command("linux-headers-{kernel_release}")
    assert command.startswith("release=$(uname -r); flavor=")
    assert ' pkg=linux-headers-"$release"; echo "$release"; ' in command


def test_the_sampled_load_takes_only_numbers_for_its_timing():
    # The load itself is one quoted word; the interval and the timeout must be numbers.
    command = sampled_load_command("sleep 1; echo done", interval_s=0.5, timeout_s=30)
    assert "sleep 0.5; done" in command and "timeout 30 sh -c 'sleep 1; echo done'" in command
    with pytest.raises(ValueError):
        sampled_load_command("true", interval_s="0.2; injected")


def test_loaded_open_module_on_the_h200_vm():
    output = captured_lines("h200x2-nvlink-vm", "cat /proc/driver/nvidia/version")
    assert NvidiaLoadedModule().process(output) == {"version": "580.159.04", "flavor": "open"}


def test_loaded_proprietary_module_banner():
    # The proprietary module's banner has no "Open Kernel Module" and a build date.
    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
    assert NvidiaLoadedModule().process([line]) == {"version": "550.54.14", "flavor": "proprietary"}


def test_no_module_loaded():
    assert NvidiaLoadedModule().process([]) is None


def test_nvcc_release_on_the_h200_vm():
    output = captured_lines("h200x2-nvlink-vm", "nvcc --version")
    assert NvccRelease().process(output) == {"release": "13.0", "version": "13.0.88"}


def test_no_nvcc():
    assert NvccRelease().process([]) is None


def test_apt_sources_one_line_debian_12():
    # /etc/apt/sources.list of a Debian 12 test host, as the fact's command prints it.
    output = lines("apt_sources_debian12_debootstrap.txt")
    assert AptSourceEntries().process(output) == [
        {
            "file": "/etc/apt/sources.list",
            "line": 1,
            "format": "one-line",
            "uris": ["http://deb.debian.org/debian"],
            "components": ["main"],
            "suites": ["bookworm"],
        }
    ]


def test_apt_sources_deb822_and_flat_repositories():
    output = [
        "/etc/apt/sources.list.d/debian.sources\t1\tTypes: deb",
        "/etc/apt/sources.list.d/debian.sources\t2\tURIs: http://deb.debian.org/debian",
        "/etc/apt/sources.list.d/debian.sources\t3\tSuites: bookworm bookworm-updates",
        "/etc/apt/sources.list.d/debian.sources\t4\tComponents: main non-free-firmware",
        "/etc/apt/sources.list.d/debian.sources\t5\t"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t1\t# Managed by pyinfra-sglang",
        "/etc/apt/sources.list.d/cuda-debian12-x86_64.list\t2\t"
        "deb [signed-by=/k.gpg] https://x/debian12/x86_64/ /",
    ]
    assert AptSourceEntries().process(output) == [
        {
            "file": "/etc/apt/sources.list.d/debian.sources",
            "line": 4,
            "format": "deb822",
            "uris": ["http://deb.debian.org/debian"],
            "components": ["main", "non-free-firmware"],
            "suites": ["bookworm", "bookworm-updates"],
        }
    ]


QUERY = (
    "nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,"
    "pcie.link.width.max,persistence_mode,compute_cap,memory.total,power.limit,clocks.max.sm "
    "--format=csv"
)


def test_nvidia_gpus_on_the_h200_vm():
    gpus = NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY))
    assert [g["index"] for g in gpus] == ["0", "1"]
    first = gpus[0]
    assert first["name"] == "NVIDIA H200" and first["compute_cap"] == "9.0"
    assert first["pcie.link.gen.max"] == "5" and first["pcie.link.width.current"] == "16"
    assert first["pcie.link.gen.hostmax"] is None  # [N/A]
    assert first["memory.total"] == "143771 MiB"


def test_nvidia_gpus_command_is_the_captured_query():
    assert QUERY in NvidiaGpus().command()


def test_nvidia_gpus_two_samples_judge_the_last():
    lines = captured_lines("h200x2-nvlink-vm", QUERY)
    second = [lines[0], lines[1].replace(", 5, 5, 5,", ", 1, 5, 5,")]
    gpus = NvidiaGpus().process(lines + second)
    assert len(gpus) == 1 and gpus[0]["pcie.link.gen.current"] == "1"


def test_nvidia_gpus_without_a_driver():
    output = ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    assert NvidiaGpus().process(output) == []


def test_memory_info():
    fact = MemoryInfo().process(lines("meminfo_ci_machine.txt"))
    assert fact["total_kb"] > fact["available_kb"] > 0


def test_python_packages_from_dist_info_folders():
    output = [
        "/opt/sglang/venv/lib/python3.11/site-packages/flash_attn-2.8.3.dist-info",
        "/opt/sglang/venv/lib/python3.11/site-packages/sglang-0.5.23.dist-info",
        "/opt/sglang/venv/lib/python3.11/site-packages/torch-2.14.1+cu130.dist-info",
    ]
    assert PythonPackages().process(output) == {
        "flash-attn": "2.8.3",
        "sglang": "0.5.23",
        "torch": "2.14.1+cu130",
    }


def test_python_version():
    assert PythonVersion().process(["Python 3.11.2"]) == "3.11.2"
    assert PythonVersion().process([]) is None


def test_apt_sources_deb822_on_ubuntu_24_04():
    # Captured on the H200 VM: sources.list holds only comments, ubuntu.sources two stanzas.
    entries = AptSourceEntries().process(lines("apt_sources_ubuntu2404_h200_vm.txt"))
    assert [(e["line"], e["uris"], e["components"]) for e in entries] == [
        (
            35,
            ["http://archive.ubuntu.com/ubuntu/"],
            ["main", "universe", "restricted", "multiverse"],
        ),
        (
            43,
            ["http://security.ubuntu.com/ubuntu/"],
            ["main", "universe", "restricted", "multiverse"],
        ),
    ]
    assert {e["file"] for e in entries} == {"/etc/apt/sources.list.d/ubuntu.sources"}


def test_memory_info_on_the_h200_vm():
    assert MemoryInfo().process(lines("meminfo_h200_vm.txt")) == {
        "total_kb": 131981020,
        "available_kb": 131488796,
    }


# Each fact that runs a program the host may lack names it, as pyinfra's own facts do.
PROGRAMS = {
    NvidiaGpus: ({}, "nvidia-smi"),
    NvidiaTopology: ({}, "nvidia-smi"),
    NvidiaP2P: ({"mode": "r"}, "nvidia-smi"),
    NvidiaSmiPackage: ({}, "nvidia-smi"),
    MokEnrolled: ({"cert_base64": "AA=="}, "mokutil"),
    AptPolicy: ({"packages": ["nvidia-open"]}, "apt-cache"),
    HttpStatus: ({"url": "http://127.0.0.1:1/"}, "python3"),
}


@pytest.mark.parametrize("fact", PROGRAMS, ids=lambda fact: fact.__name__)
def test_facts_name_the_program_they_need(fact):
    arguments, program = PROGRAMS[fact]
    assert fact().requires_command(**arguments) == program
    # The command no longer tests for it itself: pyinfra wraps it in that test.
    assert not fact().command(**arguments).startswith("command -v")


def local_state(path: str):
    """pyinfra's own @local host, planning (not executing), its shell's PATH ``path``."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all

    inventory = Inventory((["@local"], {}))
    state = State(inventory=inventory, config=Config(ENV={"PATH": path}))
    connect_all(state)
    return state, inventory.get_host("@local")


@pytest.mark.parametrize(
    ("fact", "arguments"),
    [(NvidiaGpus, {}), (NvidiaTopology, {}), (NvidiaP2P, {"mode": "r"}), (NvidiaSmiPackage, {})],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_without_nvidia_smi_pyinfra_returns_the_default(tmp_path, fact, arguments):
    # A PATH without nvidia-smi: pyinfra's requires_command guard answers, no command fails
    # and the host is not failed.
    state, host = local_state(str(tmp_path))
    with ctx_state.use(state), ctx_host.use(host):
        assert host.get_fact(fact, **arguments) == fact.default()
    assert not state.failed_hosts


def test_with_nvidia_smi_pyinfra_runs_the_fact(tmp_path):
    # The replaying test double of nvidia-smi on PATH: the same fact reads both GPUs.
    import shutil
    import sys

    from tests.hosts import nvidia_smi_replay
    from tests.unit.captures import GPU_FIXTURES

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!{sys.executable}\n" + Path(nvidia_smi_replay.__file__).read_text())
    smi.chmod(0o755)
    captures = tmp_path / "usr/share/nvidia-smi-replay/h200x2-nvlink-vm"
    shutil.copytree(GPU_FIXTURES / "h200x2-nvlink-vm", captures)
    state, host = local_state(f"{smi.parent}:/usr/bin:/bin")
    state.config.ENV["NVIDIA_SMI_REPLAY_ROOT"] = str(tmp_path)
    with ctx_state.use(state), ctx_host.use(host):
        gpus = host.get_fact(NvidiaGpus)
    assert [(gpu["index"], gpu["name"]) for gpu in gpus] == [
        ("0", "NVIDIA H200"),
        ("1", "NVIDIA H200"),
    ]


def test_empty_output_is_the_default():
    # No paths asked, no file there: "not there", never None where callers expect a dict.
    assert FileDigests.default() == {} and SnapshotDamage.default() == {}
    assert NvidiaSmiPackage().process([]) is None and FirstLine().process([""]) is None


def test_small_parsers():
    assert parse_sized_files(["123\tconfig.json", "x\ty", "7\t"]) == {"config.json": 123}
    assert parse_counts(["broken 2", "incomplete 0", "junk"]) == {"broken": 2, "incomplete": 0}
    assert parse_last_int(["", "200", ""]) == 200 and parse_last_int(["none"]) is None
    assert parse_first_nonempty(["", " nvidia-utils-590 "]) == "nvidia-utils-590"
    assert parse_venvs_by_age(
        ["1796 /opt/sglang/v2/pyvenv.cfg", "1700 /opt/sglang/v1/pyvenv.cfg", "x /y"]
    ) == ["/opt/sglang/v2", "/opt/sglang/v1"]
    assert count_gpu_classes(["0x030200", "0x030000", "0x040300"]) == 2
