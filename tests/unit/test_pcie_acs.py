"""PCIe ACS above the GPUs: the PcieAcs fact on real lspci -vvv text (tests/fixtures/pcie),
the P2P hint it leads to (pyinfra_sglang/gpu_links/p2p.py), the audit's judgement and the env
file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from checks.facts import NvidiaGpus, NvidiaP2P, NvidiaTopology, PcieAcs
from pyinfra_sglang.audit.p2p_path import findings_for_acs, findings_for_probe_hang
from pyinfra_sglang.gpu_links.p2p import PeerPath, acs_redirects, acs_unread, p2p_hint
from pyinfra_sglang.inventory import HostConfig, validate_host_data
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.parsers.pcie_acs import parse_lspci_blocks
from pyinfra_sglang.serving.placement import NodePosition
from pyinfra_sglang.serving.service_files import read_secrets, service_files
from tests.unit.captures import captured_lines

PCIE = Path(__file__).resolve().parents[1] / "fixtures" / "pcie"
PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "public"

# The trees of the posts the fixtures come from (tests/fixtures/pcie/README.md).
AMD_ACS_ON_GPU = "/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0"
X570_GPU = "/sys/devices/pci0000:00/0000:00:01.2/0000:02:00.0/0000:03:02.0/0000:06:00.0"
INTEL_GPU = "/sys/devices/pci0000:00/0000:00:1c.5/0000:02:00.0"


def fact(gpu_paths: list[str], *lspci_files: str, lspci: bool = True) -> dict:
    lines = [f"### lspci {'yes' if lspci else 'no'}"] + [f"### gpu {p}" for p in gpu_paths]
    for name in lspci_files:
        lines += (PCIE / name).read_text().splitlines()
    return PcieAcs().process(lines)


def test_acs_control_flags_are_read_from_real_lspci_blocks():
    blocks = parse_lspci_blocks(
        (PCIE / "lspci_amd_gpp_root_ports_acs_on.txt").read_text().split("\n")
    )
    assert sorted(blocks) == ["0000:00:01.1", "0000:00:01.2"]
    root = blocks["0000:00:01.1"]
    assert root["port"] == "Root Port"
    assert root["acs_ctl"] == {
        "SrcValid": True,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
        "EgressCtrl": False,
        "DirectTrans": False,
    }


def test_space_indented_blocks_without_an_acs_capability_read_as_off():
    blocks = parse_lspci_blocks((PCIE / "lspci_amd_x570_switch_no_acs.txt").read_text().split("\n"))
    assert {a: (b["port"], b["acs_ctl"]) for a, b in blocks.items()} == {
        "0000:00:01.2": ("Root Port", {}),
        "0000:02:00.0": ("Upstream Port", {}),
        "0000:03:02.0": ("Downstream Port", {}),
    }


def test_the_fact_walks_each_gpu_up_its_bridges():
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    assert acs["gpus"] == {"0000:03:00.0": ["0000:02:00.0", "0000:01:00.0", "0000:00:01.1"]}
    assert acs_redirects(acs) == {"0000:00:01.1": ["ReqRedir", "CmpltRedir"]}
    # The post printed no blocks for the switch ports: their state is unknown, not "off".
    assert acs_unread(acs) == ["0000:01:00.0", "0000:02:00.0"]


def test_acs_capability_with_every_control_off_redirects_nothing():
    acs = fact([INTEL_GPU], "lspci_intel_root_port_acs_off.txt")
    assert acs["bridges"]["0000:00:1c.5"]["acs_ctl"]["ReqRedir"] is False
    assert acs_redirects(acs) == {} and acs_unread(acs) == []


def test_lspci_without_root_reads_as_unknown():
    lines = [
        "### lspci yes",
        f"### gpu {INTEL_GPU}",
        "0000:00:1c.5 PCI bridge: Intel Corporation Sunrise Point-LP PCI Express Root Port #6 "
        "(rev f1) (prog-if 00 [Normal decode])",
        "\tCapabilities: <access denied>",
        "\tKernel driver in use: pcieport",
    ]
    acs = PcieAcs().process(lines)
    assert acs["bridges"]["0000:00:1c.5"]["acs_ctl"] is None
    assert acs_redirects(acs) == {} and acs_unread(acs) == ["0000:00:1c.5"]


def test_the_fact_command_runs_against_a_sysfs_tree_and_lspci(tmp_path: Path):
    """The real shell command, on a copy of sysfs's layout (the X570 tree) and an lspci that
    prints the post's blocks for the addresses it is asked about."""
    devices, tree = tmp_path / "bus", tmp_path / "devices"
    devices.mkdir()
    chain = X570_GPU.removeprefix("/sys/devices/").split("/")
    for depth, part in enumerate(chain[1:], start=2):
        node = tree.joinpath(*chain[:depth])
        node.mkdir(parents=True)
        is_gpu = depth == len(chain)
        (node / "vendor").write_text("0x10de\n" if is_gpu else "0x1022\n")
        (node / "class").write_text("0x030000\n" if is_gpu else "0x060400\n")
        (devices / part).symlink_to(node)
    blocks = (PCIE / "lspci_amd_x570_switch_no_acs.txt").read_text().split("\n\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for index, block in enumerate(blocks):
        (tmp_path / f"block{index}").write_text(block.strip("\n") + "\n\n")
    cases = "".join(
        f"  *{block.split()[0]}) cat {tmp_path}/block{index} ;;\n"
        for index, block in enumerate(blocks)
    )
    (bin_dir / "lspci").write_text(
        f'#!/bin/sh\nfor a; do last=$a; done\ncase "$last" in\n{cases}esac\n'
    )
    (bin_dir / "lspci").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = PcieAcs().command(devices=str(devices))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=True)
    acs = PcieAcs().process(out.stdout.splitlines())
    gpu = next(iter(acs["gpus"]))
    assert gpu == "0000:06:00.0"
    assert acs["gpus"][gpu] == ["0000:03:02.0", "0000:02:00.0", "0000:00:01.2"]
    assert sorted(acs["bridges"]) == ["0000:00:01.2", "0000:02:00.0", "0000:03:02.0"]
    assert acs_redirects(acs) == {} and acs_unread(acs) == []


# -- the hint ------------------------------------------------------------------------------

P2P_OK = {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}}
P2P_NS = {"GPU0": {"GPU0": "X", "GPU1": "NS"}, "GPU1": {"GPU0": "NS", "GPU1": "X"}}
NO_IOMMU = {"cmdline": {}, "active": False}


def test_hint_disables_p2p_where_acs_redirects():
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    hint = p2p_hint(PeerPath(p2p=P2P_OK, acs=acs, iommu=NO_IOMMU))
    assert hint.mode == "disable"
    assert "0000:00:01.1 ReqRedir+CmpltRedir" in hint.reason and "nccl#2079" in hint.reason


def test_hint_disables_p2p_where_the_iommu_translates():
    iommu = {"cmdline": {"intel_iommu": "on"}, "active": True}
    assert p2p_hint(PeerPath(p2p=P2P_OK, acs=None, iommu=iommu)).mode == "disable"
    passthrough = {"cmdline": {"intel_iommu": "on", "iommu": "pt"}, "active": True}
    assert p2p_hint(PeerPath(p2p=P2P_OK, acs=None, iommu=passthrough)).mode == "level"


def test_hint_sets_no_level_where_nvml_reports_no_p2p():
    vm = p2p_hint(PeerPath(p2p=P2P_NS, vm="kvm"))
    assert vm.mode == "none" and "GPUDirect clique" in vm.reason
    assert p2p_hint(PeerPath(p2p=P2P_NS, iommu=NO_IOMMU)).mode == "none"
    # A VM with a clique: NVML reports P2P and the level applies.
    assert p2p_hint(PeerPath(p2p=P2P_OK, vm="kvm")).mode == "level"
    # No P2P matrix (nvidia-smi gave none): nothing is claimed about P2P.
    unread = p2p_hint(PeerPath(p2p={}, vm="kvm"))
    assert (unread.mode, unread.reason) == (
        "level",
        "P2P status not read: the level follows the topology alone",
    )


def test_hint_keeps_the_level_where_p2p_works():
    acs = fact([X570_GPU], "lspci_amd_x570_switch_no_acs.txt")
    assert p2p_hint(PeerPath(p2p=P2P_OK, acs=acs, iommu=NO_IOMMU)).mode == "level"


# -- rendering -----------------------------------------------------------------------------

QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
RTX_X8 = NvidiaGpus().process(captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY))
TOPO_RTX_X8 = NvidiaTopology().process(
    captured_lines("rtxpro6000x8-pcie-from-smiq", "nvidia-smi topo -m")
)
P2P_X8_OK = {f"GPU{i}": {f"GPU{j}": "X" if i == j else "OK" for j in range(8)} for i in range(8)}


def env_file(config: HostConfig, peer: PeerPath | None) -> str:
    secrets = read_secrets(config, "gpu-host")
    files = service_files(config, "gpu-host", RTX_X8, NodePosition(), secrets, TOPO_RTX_X8, peer)
    return next(f for f in files.files if f.path.endswith("sglang.env")).content


def test_env_file_disables_p2p_with_the_reason_where_acs_redirects():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense")
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    text = env_file(config, PeerPath(p2p=P2P_X8_OK, acs=acs, iommu=NO_IOMMU))
    assert "NCCL_P2P_DISABLE=1\n" in text and "NCCL_P2P_LEVEL" not in text
    assert "# NCCL_P2P_DISABLE=1: PCIe ACS redirects peer traffic above the GPUs" in text
    assert "NCCL_IB_DISABLE=1\n" in text  # the other PCIe hints stay
    # Deterministic: the same reading renders the same file.
    assert text == env_file(config, PeerPath(p2p=P2P_X8_OK, acs=acs, iommu=NO_IOMMU))


def test_env_file_keeps_the_level_where_p2p_works_and_says_why():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense")
    acs = fact([X570_GPU], "lspci_amd_x570_switch_no_acs.txt")
    text = env_file(config, PeerPath(p2p=P2P_X8_OK, acs=acs, iommu=NO_IOMMU))
    assert "NCCL_P2P_LEVEL=SYS\n" in text and "NCCL_P2P_DISABLE" not in text
    assert "# NCCL_P2P_LEVEL=SYS: NVML reports P2P between every GPU pair" in text


def test_env_file_sets_no_p2p_variable_where_nvml_reports_none():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense")
    ns = {k: {j: ("X" if j == k else "NS") for j in v} for k, v in P2P_X8_OK.items()}
    text = env_file(config, PeerPath(p2p=ns, vm="kvm"))
    assert "NCCL_P2P_LEVEL" not in text and "NCCL_P2P_DISABLE=" not in text
    assert "# no NCCL P2P setting: VM (kvm): NVML reports no P2P" in text


def test_the_inventory_override_wins_and_is_validated():
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    config = HostConfig(
        sglang_model_profile="glm-5-nvfp4-dense", sglang_env={"NCCL_P2P_LEVEL": "PXB"}
    )
    text = env_file(config, PeerPath(p2p=P2P_X8_OK, acs=acs, iommu=NO_IOMMU))
    assert "NCCL_P2P_LEVEL=PXB\n" in text and "NCCL_P2P_DISABLE" not in text
    assert "# NCCL P2P: as sglang_env sets it (the host read: PCIe ACS redirects" in text
    config, [problem] = validate_host_data("gpu-host", {"sglang_env": {"NCCL_P2P_LEVEL": "3"}})
    assert config is None and problem.host == "gpu-host" and problem.field == "sglang_env"
    assert "NCCL_P2P_LEVEL must be one of LOC, NVL, PIX, PXB, PHB, SYS" in str(problem)
    _, [problem] = validate_host_data("gpu-host", {"sglang_env": {"NCCL_P2P_DISABLE": "yes"}})
    assert "NCCL_P2P_DISABLE must be one of 0, 1 (NCCL's values), not 'yes'" in str(problem)


# -- the audit -----------------------------------------------------------------------------

SYS_TOPOLOGY = TOPO_RTX_X8


def judged(acs, forced=None, p2p=P2P_X8_OK, iommu=NO_IOMMU, vm=None):
    path = PeerPath(p2p=p2p, acs=acs, iommu=iommu, vm=vm)
    return findings_for_acs(acs, path, forced or {}, SYS_TOPOLOGY, 8)


def test_acs_redirect_with_p2p_forced_through_the_cpu_fails():
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    findings = judged(acs, forced={"NCCL_P2P_LEVEL": "SYS"})
    redirect = next(f for f in findings if f.code == "pcie-acs-redirect")
    assert redirect.level == "fail"
    assert "NCCL_P2P_LEVEL=SYS" in redirect.message and "0000:00:01.1" in redirect.message
    assert redirect.evidence["nccl"] == {"p2p": "level", "detail": "SYS"}


def test_acs_redirect_with_p2p_disabled_or_default_warns():
    acs = fact([AMD_ACS_ON_GPU], "lspci_amd_gpp_root_ports_acs_on.txt")
    # What the deploy renders here (NCCL_P2P_DISABLE=1): a warning, P2P off costs bandwidth.
    rendered = next(f for f in judged(acs) if f.code == "pcie-acs-redirect")
    assert rendered.level == "warn" and "P2P off" in rendered.message
    # NCCL's default level (PXB) asked for explicitly: still a warning.
    default = next(
        f for f in judged(acs, {"NCCL_P2P_LEVEL": "PXB"}) if f.code == "pcie-acs-redirect"
    )
    assert default.level == "warn" and "behind one PCIe switch" in default.message
    assert "sets NCCL_P2P_LEVEL=PXB" in default.message
    # NVLinked GPUs get no P2P hint: NCCL's own default is judged.
    nvlink = {"GPU0": {"GPU0": "X", "GPU1": "NV18"}, "GPU1": {"GPU0": "NV18", "GPU1": "X"}}
    path = PeerPath(p2p=P2P_OK, acs=acs, iommu=NO_IOMMU)
    own = next(
        f for f in findings_for_acs(acs, path, {}, nvlink, 2) if f.code == "pcie-acs-redirect"
    )
    assert own.level == "warn" and "NCCL's default (PXB) still uses P2P" in own.message
    # The bridges the post left out were not read: said too.
    assert "pcie-acs-unknown" in {f.code for f in judged(acs)}


def test_no_redirect_is_ok_and_lspci_missing_is_unknown():
    clean = judged(fact([X570_GPU], "lspci_amd_x570_switch_no_acs.txt"))
    assert [(f.level, f.code) for f in clean] == [("ok", "pcie-acs")]
    missing = judged(fact([X570_GPU], lspci=False))
    assert [(f.level, f.code) for f in missing] == [("warn", "pcie-acs-unknown")]
    # One GPU, a VM or nothing read: nothing to judge.
    assert judged(None) == [] and judged(fact([X570_GPU]), vm="kvm") == []


def test_a_hung_peer_probe_is_a_finding_with_its_time_limit():
    hang = {"stage": "all-reduce", "limit_s": 48}
    [fail] = findings_for_probe_hang(hang, "level")
    assert (fail.level, fail.code) == ("fail", "p2p-probe-hang")
    assert "all-reduce test did not finish within 48 s" in fail.message
    assert '"NCCL_P2P_DISABLE": "1"' in fail.message
    [warn] = findings_for_probe_hang(hang, "disabled")
    assert warn.level == "warn"
    assert findings_for_probe_hang(None, "level") == []


def test_the_probe_hang_reaches_the_judge():
    from pyinfra_sglang.audit.judge import judge
    from pyinfra_sglang.audit.record import GpuLoadReading
    from tests.unit.test_audit_judge import expectations, h200_facts

    probe = {
        "gpus": [],
        "peers": [],
        "allreduce": [],
        "peer_hang": {"stage": "copy", "limit_s": 46},
    }
    facts = h200_facts(load=GpuLoadReading(kind="probe", probe=probe))
    hung = [f for f in judge(expectations(), facts) if f.code == "p2p-probe-hang"]
    # NVLinked H200s: NCCL's default (P2P on), so a hang fails.
    assert [(f.level, f.evidence) for f in hung] == [("fail", {"stage": "copy", "limit_s": 46})]


def test_nvml_p2p_capture_still_reads_ok():
    # The H200 capture the hint reads in the service tests (P2P OK both ways).
    p2p = NvidiaP2P().process(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r"))
    assert p2p_hint(PeerPath(p2p=p2p, vm="kvm")).mode == "level"
