"""NVSwitch systems: the Fabric section parser on real captures, the decision where Fabric
Manager runs, the role's operations from fact inputs, and the audit's judge."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import FileContents

from checks.facts import NvidiaFabric, NvidiaGpus, Virtualization
from pyinfra_sglang.audit.fabric import findings_for_cuda_init, findings_for_fabric
from pyinfra_sglang.driver.fabric import (
    fabric_attached,
    fabric_manager_candidates,
    fabric_manager_problems,
    fabric_need,
    installed_fabric_manager,
    parse_cuda_init,
    parse_fabric,
    parse_fabric_sections,
    subnet_manager_for,
)
from roles.common import apt_install
from roles.fabric_manager import (
    fabric_manager_at_driver_version,
    install_at_driver_version_command,
    subnet_manager_installed,
    subnet_manager_modules,
)
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
H200_VM = GPU / "h200x2-nvlink-vm" / "smi_q.txt"
PCIE = GPU / "smiq_8x_rtxpro6000_server_driver595_full.txt"
HGX_IN_PROGRESS = GPU / "h200x8-hgx-fabric-in-progress" / "smi_q.txt"
PUBLIC = GPU / "public"

BARE = {"container": None, "vm": None}
NSPAWN = {"container": "systemd-nspawn", "vm": None}
VM = {"container": None, "vm": "kvm"}


def lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("# source:")]


def fabric_of(path: Path, nvswitches: int = 0) -> dict:
    return {"nvswitches": nvswitches, "gpus": parse_fabric_sections(lines(path))}


# --- parser ------------------------------------------------------------------------------


def test_the_h200_vm_capture_is_fabric_attached_and_registered():
    gpus = parse_fabric_sections(lines(H200_VM))
    assert gpus == [
        {"index": 0, "state": "Completed", "status": "Success", "clique_id": "0"},
        {"index": 1, "state": "Completed", "status": "Success", "clique_id": "0"},
    ]
    assert fabric_attached(gpus)


def test_a_pcie_board_reads_na_and_is_not_fabric_attached():
    gpus = parse_fabric_sections(lines(PCIE))
    assert len(gpus) == 8
    assert {(g["state"], g["status"], g["clique_id"]) for g in gpus} == {("N/A", "N/A", "N/A")}
    assert not fabric_attached(gpus)


def test_the_derived_hgx_capture_waits_for_fabric_manager():
    gpus = parse_fabric_sections(lines(HGX_IN_PROGRESS))
    assert [g["index"] for g in gpus] == list(range(8))
    assert {(g["state"], g["status"]) for g in gpus} == {("In Progress", "N/A")}


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "fabric_completed_insufficient_resources.txt",
            ("Completed", "Insufficient Resources", "0"),
        ),
        ("fabric_completed_success_unhealthy.txt", ("Completed", "Success", "2")),
    ],
)
def test_public_fabric_sections_read_as_posted(name, expected):
    [gpu] = parse_fabric_sections(lines(PUBLIC / name))
    assert (gpu["state"], gpu["status"], gpu["clique_id"]) == expected


def test_the_facts_output_counts_nvswitch_functions_only():
    # What the fact prints: every vendor 0x10de function's class, then the filtered -q.
    output = ["pci 0x030200", "pci 0x068000", "pci 0x068000", "pci 0x040300"]
    output += ["GPU 00000000:18:00.0", "    Fabric", "        State : Not Started"]
    fabric = parse_fabric(output)
    assert fabric["nvswitches"] == 2
    assert fabric["gpus"][0]["state"] == "Not Started"
    assert NvidiaFabric.default() == {"nvswitches": 0, "gpus": [], "modules": []}


def test_the_fact_reads_the_subnet_managers_modules_from_proc_modules(tmp_path):
    # /proc/modules' format: name, size, users, users' names, state, address.
    modules = tmp_path / "modules"
    modules.write_text(
        "ib_umad 45056 0 - Live 0x0000000000000000\n"
        "mlx5_ib 466944 0 - Live 0x0000000000000000\n"
        "mlx5_core 2498560 1 mlx5_ib, Live 0x0000000000000000\n"
        "mlx5_core_x 1 0 - Live 0x0\n"
        "nvidia 1 0 - Live 0x0\n"
    )
    command = NvidiaFabric().command().replace("/proc/modules", str(modules))
    command = command.replace("/sys/bus/pci/devices/*", str(tmp_path / "none" / "*"))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert parse_fabric(out.stdout.splitlines())["modules"] == ["ib_umad", "mlx5_core", "mlx5_ib"]


def test_the_facts_awk_filter_keeps_the_fabric_sections_of_the_real_capture():
    command = NvidiaFabric().command()
    awk = command[command.index("| awk ") + 6 : command.index("; fi")]
    out = subprocess.run(
        f"awk {awk[awk.index(chr(39)) :]} {H200_VM}", shell=True, capture_output=True, text=True
    ).stdout
    assert parse_fabric(out.splitlines())["gpus"] == parse_fabric_sections(lines(H200_VM))
    assert len(out.splitlines()) < 40  # only the GPU lines and their Fabric sections


# --- where Fabric Manager runs -----------------------------------------------------------


@pytest.mark.parametrize(
    "capture, nvswitches, virtualization, where",
    [
        (H200_VM, 0, VM, "hypervisor"),  # the real capture: FM runs outside the VM
        (H200_VM, 0, NSPAWN, "here"),  # the same GPUs in a container: NVIDIA's driver container
        (H200_VM, 0, BARE, "here"),
        # A container inside a VM (the test hosts: nspawn on a KVM machine) is a container.
        (H200_VM, 0, {"container": "systemd-nspawn", "vm": "kvm"}, "here"),
        (H200_VM, 0, {"container": "unknown", "vm": "hypervisor"}, "hypervisor"),
        (HGX_IN_PROGRESS, 0, BARE, "here"),
        (HGX_IN_PROGRESS, 6, VM, "here"),  # NVSwitches passed through to the VM
        (PCIE, 0, BARE, "none"),
        (PCIE, 0, NSPAWN, "none"),
        (PCIE, 0, VM, "none"),
    ],
)
def test_where_fabric_manager_runs(capture, nvswitches, virtualization, where):
    need = fabric_need(fabric_of(capture, nvswitches), virtualization)
    assert need.where == where, need.reason


def test_nvswitches_without_a_readable_gpu_still_need_fabric_manager():
    # A bare-metal HGX before its driver: sysfs shows the switches, nvidia-smi nothing yet.
    need = fabric_need({"nvswitches": 4, "gpus": []}, BARE)
    assert need.here and "4 NVSwitch PCI functions" in need.reason
    assert fabric_need({"nvswitches": 0, "gpus": []}, BARE).where == "none"


def test_not_supported_is_no_fabric():
    # NVML's answer on H100 PCIe and single-GPU set-ups (leptonai/gpud#1147, #1140).
    gpus = [{"index": 0, "state": "Not Supported", "status": "Success", "clique_id": "0"}]
    assert fabric_need({"nvswitches": 0, "gpus": gpus}, BARE).where == "none"


def test_fabric_manager_names_per_family_and_what_is_installed():
    assert fabric_manager_candidates("debian", 590) == (
        "nvidia-fabricmanager",
        "nvidia-fabricmanager-590",
    )
    assert fabric_manager_candidates("ubuntu", 580)[1] == "nvidia-fabricmanager-580"
    installed = {"nvidia-fabricmanager-580": ["580.159.03-0ubuntu0.24.04.1"], "nvidia-smi": ["1"]}
    assert installed_fabric_manager(installed) == (
        "nvidia-fabricmanager-580",
        "580.159.03-0ubuntu0.24.04.1",
    )
    assert installed_fabric_manager({"nvidia-fabricmanager-dev-580": ["580.1-1"]}) is None


def test_nvlink5_needs_the_subnet_manager():
    assert subnet_manager_for(["sm_90", "sm_90"]) is None
    entry = subnet_manager_for(["sm_100"])
    assert entry is not None and entry.packages == ("nvlsm", "infiniband-diags")
    assert entry.kernel_modules == ("mlx5_core", "mlx5_ib", "ib_umad")
    assert subnet_manager_for(["sm_103"]) == entry
    assert subnet_manager_for([None]) is None


# --- the role's operations ---------------------------------------------------------------

MODULES = ("nvidia-kernel-open-dkms",)
NAMES = ("nvidia-fabricmanager", "nvidia-fabricmanager-590")
ATTACHED = fabric_of(H200_VM)
NOT_ATTACHED = fabric_of(PCIE)
B200 = [{"index": "0", "compute_cap": "10.0"}]
H200 = [{"index": "0", "compute_cap": "9.0"}]
INSTALL = str(install_at_driver_version_command(NAMES, MODULES))
FM_ARGS = {"candidates": NAMES, "module_packages": MODULES}

OP_CASES = [
    op_case(
        fabric_manager_at_driver_version,
        "pcie",
        {NvidiaFabric: NOT_ATTACHED, Virtualization: BARE},
        FM_ARGS,
        noops=["no Fabric Manager here: no NVSwitch and no fabric-attached GPU (Fabric State N/A)"],
    ),
    op_case(
        fabric_manager_at_driver_version,
        "hypervisor",
        {NvidiaFabric: ATTACHED, Virtualization: VM},
        FM_ARGS,
        noops=[
            "no Fabric Manager here: the GPUs are fabric-attached (State Completed) in a VM "
            "(kvm) that sees no NVSwitch: the hypervisor runs Fabric Manager"
        ],
    ),
    op_case(
        fabric_manager_at_driver_version,
        "absent",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: NSPAWN,
            DebPackages: {"nvidia-kernel-open-dkms": ["590.48.01-1"]},
        },
        FM_ARGS,
        commands=[INSTALL],
    ),
    op_case(
        fabric_manager_at_driver_version,
        "at-the-driver",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: NSPAWN,
            DebPackages: {
                "nvidia-kernel-open-dkms": ["590.48.01-1"],
                "nvidia-fabricmanager": ["590.48.01-1"],
            },
        },
        FM_ARGS,
        noops=[
            "nvidia-fabricmanager 590.48.01-1 is at the driver's release (the GPUs are "
            "fabric-attached (State Completed) in a container (systemd-nspawn): FM runs here)"
        ],
    ),
    op_case(
        fabric_manager_at_driver_version,
        "driver-moved",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: NSPAWN,
            DebPackages: {
                "nvidia-kernel-open-dkms": ["595.58.03-1"],
                "nvidia-fabricmanager": ["590.48.01-1"],
            },
        },
        FM_ARGS,
        commands=[INSTALL],
    ),
    op_case(
        subnet_manager_installed,
        "hopper",
        {NvidiaFabric: ATTACHED, Virtualization: BARE, NvidiaGpus: H200},
        noops=["no NVLink 5 fabric here: no NVLink Subnet Manager"],
    ),
    op_case(
        subnet_manager_installed,
        "blackwell",
        {NvidiaFabric: ATTACHED, Virtualization: BARE, NvidiaGpus: B200, DebPackages: {}},
        commands=[str(apt_install(["nvlsm", "infiniband-diags"], "--no-install-recommends"))],
    ),
    op_case(
        subnet_manager_modules,
        "blackwell-bare-metal",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: BARE,
            NvidiaGpus: B200,
            FileContents: None,
        },
        commands=[
            "printf %s 'mlx5_core\nmlx5_ib\nib_umad\n' > "
            "/etc/modules-load.d/nvidia-fabricmanager.conf && modprobe -a mlx5_core mlx5_ib "
            "ib_umad"
        ],
    ),
    op_case(
        subnet_manager_modules,
        "blackwell-loaded",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: BARE,
            NvidiaGpus: B200,
            FileContents: ["mlx5_core", "mlx5_ib", "ib_umad"],
        },
        noops=["/etc/modules-load.d/nvidia-fabricmanager.conf loads mlx5_core, mlx5_ib, ib_umad"],
    ),
    op_case(
        subnet_manager_modules,
        "blackwell-file-of-an-earlier-release",
        {
            NvidiaFabric: ATTACHED,
            Virtualization: BARE,
            NvidiaGpus: B200,
            FileContents: ["ib_umad"],
        },
        commands=[
            "printf %s 'mlx5_core\nmlx5_ib\nib_umad\n' > "
            "/etc/modules-load.d/nvidia-fabricmanager.conf && modprobe -a mlx5_core mlx5_ib "
            "ib_umad"
        ],
    ),
    op_case(
        subnet_manager_modules,
        "blackwell-container",
        {NvidiaFabric: ATTACHED, Virtualization: NSPAWN, NvidiaGpus: B200},
        noops=["in a container (systemd-nspawn) the outer host loads the kernel modules"],
    ),
]


@pytest.mark.parametrize(OP_CASE_FIELDS, OP_CASES)
def test_operation_yields_exactly(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


def fake_tools(folder: Path, module: str | None, madison: dict[str, list[str]]) -> dict:
    """dpkg-query, apt-cache and apt-get answering as they do, apt-get echoing its args."""
    dpkg = folder / "dpkg-query"
    status = f"ii  {module}" if module else ""
    dpkg.write_text(
        "#!/bin/sh\n"
        + (
            f'[ "$3" = nvidia-kernel-open-dkms ] && printf %s "{status}" && exit 0\n'
            if module
            else ""
        )
        + "exit 1\n"
    )
    cache = folder / "apt-cache"
    body = "".join(
        f"  {name}) printf '%s\\n' "
        + " ".join(f"'{name} | {v} | http://mirror/ Packages'" for v in versions)
        + " ;;\n"
        for name, versions in madison.items()
    )
    cache.write_text(f'#!/bin/sh\ncase "$2" in\n{body}esac\n')
    for name in ("apt-get", "systemctl"):
        (folder / name).write_text('#!/bin/sh\necho "$(basename "$0") $*"\n')
    for tool in folder.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin"}


def run_install(tmp_path, module, madison):
    env = fake_tools(tmp_path, module, madison)
    script = str(install_at_driver_version_command(NAMES, MODULES))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)


def test_the_install_picks_the_driver_release_of_the_first_name_apt_has(tmp_path):
    madison = {
        "nvidia-fabricmanager": ["595.58.03-1", "590.48.01-1", "590.44.01-1"],
        "nvidia-fabricmanager-590": ["590.48.01-0ubuntu1"],
    }
    done = run_install(tmp_path, "590.48.01-1", madison)
    assert done.returncode == 0, done.stderr
    assert (
        "install --no-install-recommends --allow-downgrades nvidia-fabricmanager=590.48.01-1"
        in (done.stdout)
    )
    assert done.stdout.splitlines()[-1] == "systemctl daemon-reload"
    # Only the suffixed name (Ubuntu's archive) has it: that one, at its own revision.
    older = run_install(
        tmp_path, "1:580.159.03-1", {"nvidia-fabricmanager-590": ["580.159.03-0ubuntu0.24.04.1"]}
    )
    assert "nvidia-fabricmanager-590=580.159.03-0ubuntu0.24.04.1" in older.stdout


def test_the_install_stops_naming_what_is_missing(tmp_path):
    none = run_install(tmp_path, "590.48.01-1", {"nvidia-fabricmanager": ["595.58.03-1"]})
    assert none.returncode == 100 and "apt-get" not in none.stdout
    assert none.stderr.strip() == (
        "nvidia-fabricmanager or nvidia-fabricmanager-590: apt has no version at the "
        "driver's release 590.48.01 in the configured repositories (is the NVIDIA "
        "repository or its mirror complete?)"
    )
    no_driver = run_install(tmp_path, None, {"nvidia-fabricmanager": ["590.48.01-1"]})
    assert no_driver.returncode == 1
    assert "no NVIDIA kernel module package (nvidia-kernel-open-dkms) is installed" in (
        no_driver.stderr
    )


# --- the audit ---------------------------------------------------------------------------

ACTIVE = {"LoadState": "loaded", "ActiveState": "active", "Result": "success"}
FAILED = {"LoadState": "loaded", "ActiveState": "failed", "Result": "exit-code"}
FM_590 = ("nvidia-fabricmanager", "590.48.01-1")


def judged(fabric, virtualization, service, package, driver):
    [finding] = findings_for_fabric(fabric, virtualization, service, package, driver)
    return finding


def test_the_audit_passes_fabric_manager_running_at_the_driver():
    finding = judged(ATTACHED, NSPAWN, ACTIVE, FM_590, "590.48.01")
    assert (finding.level, finding.code) == ("ok", "fabric-manager")
    assert "590.48.01-1 runs at the driver's release (590.48.01)" in finding.message


@pytest.mark.parametrize(
    "service, package, driver, says",
    [
        (FAILED, FM_590, "590.48.01", "nvidia-fabricmanager.service is failed, result exit-code"),
        ({"LoadState": "not-found"}, None, "590.48.01", "does not exist"),
        (
            ACTIVE,
            ("nvidia-fabricmanager", "580.126.20-1"),
            "590.48.01",
            "nvidia-fabricmanager is 580.126.20, the driver is 590.48.01",
        ),
    ],
)
def test_the_audit_fails_fabric_manager_down_or_at_another_release(service, package, driver, says):
    finding = judged(ATTACHED, BARE, service, package, driver)
    assert finding.level == "fail" and says in finding.message
    assert "error 802" in finding.message


def test_the_audit_fails_a_fabric_that_is_not_registered_even_with_fabric_manager_up():
    finding = judged(fabric_of(HGX_IN_PROGRESS), BARE, ACTIVE, FM_590, "590.48.01")
    assert finding.level == "fail"
    assert "GPU 0: State In Progress, Status N/A" in finding.message
    public = fabric_of(PUBLIC / "fabric_completed_insufficient_resources.txt")
    assert (
        "Status Insufficient Resources" in judged(public, BARE, ACTIVE, FM_590, "590.48.01").message
    )


def test_the_audit_passes_a_pcie_board_saying_no_nvswitch():
    finding = judged(NOT_ATTACHED, BARE, {}, None, "595.45.04")
    assert finding.level == "ok" and finding.message.startswith("no NVSwitch fabric")


def test_a_vm_whose_hypervisor_manages_the_fabric():
    ok = judged(ATTACHED, VM, {"LoadState": "not-found"}, None, "580.159.04")
    assert ok.level == "ok" and "managed by the hypervisor of this VM (kvm)" in ok.message
    waiting = judged(fabric_of(HGX_IN_PROGRESS), VM, {}, None, "580.159.04")
    assert waiting.level == "fail" and "Fabric Manager runs on the hypervisor" in waiting.message


def test_a_record_made_before_is_not_judged():
    assert findings_for_fabric(None, BARE, None, None, None) == []
    assert findings_for_cuda_init(None) == []


def test_nvlink5_fails_without_its_subnet_managers_modules():
    # An HGX B200 on bare metal: FM runs, but mlx5_ib was never loaded.
    fabric = {**ATTACHED, "modules": ["ib_umad", "mlx5_core"]}
    args = (fabric, BARE, ACTIVE, FM_590, "590.48.01")
    [finding] = findings_for_fabric(*args, ["sm_100"] * 8)
    assert finding.level == "fail" and "kernel modules mlx5_ib, not loaded" in finding.message
    assert finding.evidence["modules_missing"] == ["mlx5_ib"]
    loaded = {**fabric, "modules": ["ib_umad", "mlx5_core", "mlx5_ib"]}
    assert findings_for_fabric(loaded, *args[1:], ["sm_100"] * 8)[0].level == "ok"
    # Hopper (NVLink 4) needs none; a record made before the modules were read says nothing.
    assert findings_for_fabric(fabric, *args[1:], ["sm_90"] * 8)[0].level == "ok"
    assert findings_for_fabric(ATTACHED, *args[1:], ["sm_100"] * 8)[0].level == "ok"
    # In a container the outer host loads them (roles/fabric_manager.py): not judged here.
    assert findings_for_fabric(fabric, NSPAWN, *args[2:], ["sm_100"] * 8)[0].level == "ok"


def test_host_mode_problems_name_what_was_found():
    assert fabric_manager_problems(ACTIVE, FM_590, "590.48.01") == []
    assert fabric_manager_problems(ACTIVE, None, "590.48.01") == []  # a runfile's FM
    assert fabric_manager_problems(
        {"LoadState": "loaded", "ActiveState": "inactive"}, FM_590, "590.48.01"
    ) == ["nvidia-fabricmanager.service is inactive"]


@pytest.mark.parametrize(
    "output, level, says",
    [
        (['{"probed": true, "result": 0}'], "ok", "CUDA initializes"),
        (['{"probed": true, "result": 802}'], "fail", "802 (CUDA_ERROR_SYSTEM_NOT_READY)"),
        (['{"probed": true, "result": 100}'], "fail", "CUDA_ERROR_NO_DEVICE"),
        (
            [
                '{"probed": false, "reason": "libcuda.so.1 cannot be loaded: libcuda.so.1: cannot '
                'open shared object file: No such file or directory"}'
            ],
            "ok",
            "not probed: libcuda.so.1 cannot be loaded",
        ),
        (["no-python"], "ok", "not probed: no python on the host"),
        (["Traceback (most recent call last):", "SyntaxError"], "ok", "not probed: the probe"),
    ],
)
def test_cuda_init(output, level, says):
    [finding] = findings_for_cuda_init(parse_cuda_init(output))
    assert (finding.level, finding.code) == (level, "cuda-init")
    assert says in finding.message


def test_the_probe_runs_with_python_and_says_why_it_did_not_probe():
    # This machine has no NVIDIA driver: the real probe must say it could not load libcuda.
    from checks.facts import CudaInit

    out = subprocess.run(
        CudaInit().command(venv="/nonexistent"), shell=True, capture_output=True, text=True
    ).stdout
    result = parse_cuda_init(out.splitlines())
    if result.get("probed"):
        pytest.skip("this machine has a loadable libcuda.so.1")
    assert result["reason"].startswith("libcuda.so.1 cannot be loaded")


def test_a_branch_move_leaves_fabric_manager_to_its_role():
    from pyinfra_sglang.driver.nvidia import packages_off_branch

    installed = {
        "nvidia-driver-cuda": ["590.48.01-1"],
        "nvidia-fabricmanager": ["590.48.01-1"],
        "nvidia-fabricmanager-580": ["580.126.20-1"],
    }
    assert packages_off_branch(installed, 595) == ["nvidia-driver-cuda"]


@pytest.mark.parametrize(
    "capture, level, says",
    [
        (H200_VM, "ok", "the NVLink fabric is registered (Completed/Success on every GPU)"),
        (PCIE, "ok", "no NVSwitch fabric (Fabric State N/A)"),
        (HGX_IN_PROGRESS, "fail", "GPU 7: State In Progress, Status N/A"),
    ],
)
def test_analyze_reads_the_fabric_of_a_pasted_smi_q(capture, level, says):
    from pyinfra_sglang.audit.analyze import analyze

    result = analyze(smi_q=lines(capture))
    [finding] = [f for f in result["findings"] if f["code"] == "fabric-manager"]
    assert finding["level"] == level and says in finding["message"]
    assert len(result["gpus"]) == len(parse_fabric_sections(lines(capture)))
