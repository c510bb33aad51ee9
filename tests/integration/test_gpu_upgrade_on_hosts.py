"""A whole GPU upgrade replayed on a real Debian 12 test host (docs/gpu-upgrade.md): the host's
nvidia-smi switches from the 2x H200 capture (sm_90, driver 580) to the 8x RTX PRO 6000 one
(sm_120, driver 595), the inventory follows the new box (branch 595, eight GPUs), and
deploy/site.py converges it: audit before, apply, apply again, audit after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyinfra_sglang.inventory import HostConfig
from tests.hosts.apply import apply
from tests.hosts.audit_report import assert_audit_changed_nothing, findings, levels

pytestmark = pytest.mark.hosts

CAPTURE_CHOICE = "/etc/nvidia-smi-replay/capture"
NEW_BOX = ("--data", "nvidia_driver_branch=595", "--data", "expected_gpu_count=8")
SITE = f"{HostConfig(python_version='3.11').venv_path}/lib/python3.11/site-packages"


def audit(inventory, report_dir: Path, address: str) -> dict[str, list[dict]]:
    """{code: [findings]} of one host, audited with the new box's inventory."""
    result = apply(
        inventory,
        "deploy/audit.py",
        options=("--limit", address, "--data", f"audit_report_dir={report_dir}", *NEW_BOX),
    )
    assert_audit_changed_nothing(result, report_dir)
    return findings(report_dir, address)


def test_an_h200_host_upgraded_to_eight_rtx_pro_6000_converges_in_one_apply(
    host_pool, hosts, inventory, tmp_path
):
    upgraded, other = hosts
    host_pool.run(
        upgraded,
        f"mkdir -p {CAPTURE_CHOICE.rsplit('/', 1)[0]} "
        f"&& echo rtxpro6000x8-pcie-from-smiq > {CAPTURE_CHOICE}",
    )
    try:
        before = audit(inventory, tmp_path / "before", upgraded.address)
        # Built for the H200s, rendered for two GPUs, driver packages of branch 590.
        assert {"flash-attn-arch-mismatch", "unit-drift"} <= levels(before, "fail"), before
        assert "gpu-count" in levels(before, "ok")

        converged = apply(inventory, options=("--limit", upgraded.address, *NEW_BOX))
        assert converged.returncode == 0 and not converged.errors(), converged.describe()
        changed = converged.changed(upgraded.address)
        for op in (
            "NVIDIA driver | Lock the driver to branch 595",
            "NVIDIA driver | Install the compute driver (open modules)",
            "flash-attn | Build flash-attn 2.8.3",
            "SGLang service | Serve dense-bf16 with SGLang 0.5.23",
        ):
            assert op in changed, converged.describe()
        seen = json.loads(host_pool.run(upgraded, f"cat {SITE}/flash_attn/build_env.json").stdout)
        assert seen["FLASH_ATTN_CUDA_ARCHS"] == "120"
        # The unit follows the new GPUs: TP 8, and PCIe-only NCCL hints for a box whose GPU
        # pairs cross its two sockets (the capture's topo -m: SYS).
        argv = json.loads(host_pool.run(upgraded, "cat /run/sglang-standin/30000.json").stdout)[
            "argv"
        ]
        assert argv[argv.index("--tp-size") + 1] == "8"
        env = host_pool.run(upgraded, "cat /etc/sglang/sglang.env").stdout.splitlines()
        assert {"NCCL_P2P_LEVEL=SYS", "NCCL_IB_DISABLE=1"} <= set(env), env

        again = apply(inventory, options=("--limit", upgraded.address, *NEW_BOX))
        again.assert_unchanged()

        after = audit(inventory, tmp_path / "after", upgraded.address)
        # Only the replay remains: the RTX box's readings were captured idle, at PCIe Gen1, and
        # replay so while the decode prompt loads them (the x8-of-x16 audit test says the same).
        assert levels(after, "fail") == {"pcie-gen-below-max"}, after
        assert {f["evidence"]["read"] for f in after["pcie-gen-below-max"]} == {"under load"}
        assert {"flash-attn", "unit", "service", "gpu-count", "decode-sanity"} <= levels(
            after, "ok"
        ), after
        [built] = after["flash-attn"]
        assert built["message"] == "flash-attn 2.8.3 built for 120 (the GPUs' 120)."
    finally:
        host_pool.run(upgraded, f"rm -f {CAPTURE_CHOICE}")
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    # Back on the H200s and branch 590 (the reverse upgrade: flash-attn built for 90 again,
    # NVLink, no PCIe hints); the other host was never touched.
    assert "flash-attn | Build flash-attn 2.8.3" in back.changed(upgraded.address)
    seen = json.loads(host_pool.run(upgraded, f"cat {SITE}/flash_attn/build_env.json").stdout)
    assert seen["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert "NCCL_P2P_LEVEL" not in host_pool.run(upgraded, "cat /etc/sglang/sglang.env").stdout
    assert back.changed(other.address) == [], back.describe()
    # And the one apply back left nothing to do.
    apply(inventory).assert_unchanged()
