"""The audit's checks (facts -> findings) on real captures, and the facts they add."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.facts import IommuState, NvidiaGpus, SystemdUnitState
from pyinfra_sglang.audit.drift import (
    findings_for_cuda,
    findings_for_driver,
    findings_for_gpu_count,
    findings_for_iommu,
    findings_for_persistence,
    findings_for_sglang_version,
)
from pyinfra_sglang.audit.findings import Finding, worst_level
from pyinfra_sglang.audit.gpu_load import sampled_load_command
from pyinfra_sglang.audit.links import findings_for_links, links_under_load, pcie_links
from pyinfra_sglang.audit.load import after_decode, after_load, needs_load
from pyinfra_sglang.audit.record import GpuLoadReading
from pyinfra_sglang.audit.report import format_table, report, write_report
from pyinfra_sglang.audit.service import (
    findings_for_decode,
    findings_for_service,
    findings_for_unit_drift,
)
from pyinfra_sglang.audit.topology import findings_for_p2p, findings_for_topology
from pyinfra_sglang.parsers.nvidia_smi import (
    GPU_QUERY_FIELDS,
    parse_gpu_query_samples,
    parse_gpu_query_under_load,
)
from pyinfra_sglang.parsers.topo import parse_topo_matrix, parse_topo_p2p
from tests.unit.captures import captured_lines
from tests.unit.test_topology_facts import public_lines

QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
H200 = NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY))
RTX = NvidiaGpus().process(captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY))
RTX_X8 = NvidiaGpus().process(captured_lines("rtxpro6000x8-pcie-x8-of-x16", QUERY))
H200_TOPO = parse_topo_matrix(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m"))
H200_P2P = parse_topo_p2p(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r"))
ASUS_TOPO = parse_topo_matrix(public_lines("topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt"))


def codes(findings: list[Finding], level: str | None = None) -> list[str]:
    return [f.code for f in findings if level is None or f.level == level]


def with_gen(rows: list[dict], gen: str) -> list[dict]:
    return [{**row, "pcie.link.gen.current": gen} for row in rows]


# --- links ---------------------------------------------------------------------------------


def test_pcie_links_shape_from_the_h200_capture():
    assert pcie_links(H200) == [
        {
            "index": i,
            "name": "NVIDIA H200",
            "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16},
        }
        for i in (0, 1)
    ]


def test_links_at_their_maximum_are_ok():
    findings = findings_for_links(H200, [], "none")
    assert codes(findings) == ["pcie-links"] and worst_level(findings) == "ok"
    assert "may be idle" in findings[0].message


def test_idle_rtx_links_at_gen1_are_a_warning_that_says_idle():
    # The real 8x RTX PRO 6000 capture was taken idle: Gen1 of Gen5 on every GPU.
    findings = findings_for_links(RTX, [], "none")
    assert codes(findings) == ["pcie-gen-below-max"] * 8
    assert {f.level for f in findings} == {"warn"}
    assert all("Gen1 of Gen5" in f.message and "idle" in f.message for f in findings)


def test_links_that_stay_low_under_load_fail():
    findings = findings_for_links(RTX, [with_gen(RTX, "2"), with_gen(RTX, "2")], "decode")
    assert codes(findings, "fail") == ["pcie-gen-below-max"] * 8
    assert "Gen2 of Gen5" in findings[0].message and "decode sanity prompt" in findings[0].message


def test_links_that_train_up_under_load_are_ok():
    samples = [with_gen(RTX, "1"), with_gen(RTX, "5")]
    assert links_under_load(samples)[3]["gen_current"] == 5
    findings = findings_for_links(RTX, samples, "copy")
    assert codes(findings) == ["pcie-links"]
    assert findings[0].evidence == {"read": "under load", "load": "copy"}


def test_samples_of_a_load_that_failed_are_not_taken_as_under_load():
    findings = findings_for_links(RTX, [with_gen(RTX, "2")], "none")
    assert {f.level for f in findings} == {"warn"}


def test_x8_of_x16_link_fails_for_that_gpu_only():
    findings = findings_for_links(RTX_X8, [with_gen(RTX_X8, "5")], "copy")
    degraded = [f for f in findings if f.code == "pcie-width-degraded"]
    assert [(f.gpu, f.level) for f in degraded] == [(5, "fail")]
    assert "x8 of x16" in degraded[0].message
    assert "pcie-gen-below-max" not in codes(findings)


def test_query_samples_keep_every_sample_and_the_fact_judges_the_last():
    lines = captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY)
    later = [line.replace(", 1, 5, 5, 5,", ", 5, 5, 5, 5,") for line in lines]
    samples = parse_gpu_query_samples(lines + later)
    assert [len(s) for s in samples] == [8, 8]
    assert {row["pcie.link.gen.current"] for row in samples[0]} == {"1"}
    assert {row["pcie.link.gen.current"] for row in NvidiaGpus().process(lines + later)} == {"5"}


def test_a_run_under_load_splits_load_output_and_samples():
    lines = captured_lines("h200x2-nvlink-vm", QUERY)
    output = [
        "### load rc=0",
        '{"gpus": [{"index": 0, "h2d_gbs": 55.3}]}',
        "### samples",
        *lines,
        *lines,
    ]
    assert parse_gpu_query_under_load(output) == {
        "load_rc": 0,
        "load_output": ['{"gpus": [{"index": 0, "h2d_gbs": 55.3}]}'],
        "samples": [H200, H200],
        "clock_reasons": [],  # a run recorded before the clock reasons were sampled
    }
    assert parse_gpu_query_under_load(["mktemp: failed"]) == {
        "load_rc": None,
        "load_output": ["mktemp: failed"],
        "samples": [],
        "clock_reasons": [],
    }


def test_the_sampled_load_command_samples_while_the_load_runs(tmp_path):
    """The host program, run by sh with the replaying nvidia-smi on PATH (the test double of
    the driver's tool): the load's output and exit status come back, and samples taken while
    it ran."""
    import os
    import shutil
    import subprocess
    import sys

    from tests.hosts import nvidia_smi_replay
    from tests.unit.captures import GPU_FIXTURES

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\n" + Path(nvidia_smi_replay.__file__).read_text())
    smi.chmod(0o755)
    root = tmp_path / "root"
    shutil.copytree(
        GPU_FIXTURES / "h200x2-nvlink-vm", root / "usr/share/nvidia-smi-replay/h200x2-nvlink-vm"
    )
    # A load with quotes and a heredoc, as the audit's decode and copy loads are.
    load = (
        "python3 - <<'EOF'\nimport time; time.sleep(0.6); print('{\"it\": \"ran\"}')\nEOF\nexit 3"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "NVIDIA_SMI_REPLAY_ROOT": str(root),
    }
    run = subprocess.run(
        ["sh", "-c", sampled_load_command(load, interval_s=0.1, timeout_s=30)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    result = parse_gpu_query_under_load(run.stdout.splitlines())
    assert result["load_rc"] == 3 and result["load_output"] == ['{"it": "ran"}']
    assert len(result["samples"]) >= 2 and all(sample == H200 for sample in result["samples"])


# --- topology and P2P ----------------------------------------------------------------------


def test_nvlinked_h200_pair_is_ok():
    assert codes(findings_for_topology(H200_TOPO, 2)) == ["topology"]
    assert codes(findings_for_p2p(H200_P2P, 2, vm=None)) == ["p2p"]


def test_pcie_only_dual_socket_box_warns_pcie_only_and_cross_numa():
    findings = findings_for_topology(ASUS_TOPO, 8)
    assert codes(findings, "warn") == ["topology-pcie-only", "topology-cross-numa"]
    pcie_only, cross = findings
    assert "none of the GPU pairs" in pcie_only.message and "worst path SYS" in pcie_only.message
    assert pcie_only.evidence["pairs"] == {"PIX": 4, "NODE": 8, "SYS": 16}
    assert len(cross.evidence["pairs"]) == 16 and "GPU0-GPU4" in cross.evidence["pairs"]


def test_tensor_parallelism_over_one_gpu_has_no_topology_to_judge():
    assert codes(findings_for_topology({}, 1)) == ["topology"]
    assert findings_for_topology({}, 0) == [] and findings_for_p2p({}, 1, None) == []


def test_missing_topology_matrix_with_several_gpus_is_a_warning():
    assert codes(findings_for_topology({}, 8), "warn") == ["topology-unknown"]
    assert codes(findings_for_p2p({}, 8, None), "warn") == ["p2p-unavailable"]


def test_p2p_unavailable_in_a_vm_points_at_the_hypervisor():
    p2p = {
        g: {h: ("X" if g == h else "NS") for h in ("GPU0", "GPU1", "GPU2")}
        for g in ("GPU0", "GPU1", "GPU2")
    }
    [finding] = findings_for_p2p(p2p, 3, vm="kvm")
    assert finding.code == "p2p-unavailable" and "3 of 3" in finding.message
    assert "a VM (kvm)" in finding.message and "GPUDirect clique" in finding.message


# --- drift ---------------------------------------------------------------------------------

LOADED_580 = {"version": "580.159.04", "flavor": "open"}


def test_h200_vm_driver_580_drifts_from_a_590_inventory():
    findings = findings_for_driver(590, "open", LOADED_580, None, "580.159.04", 2)
    assert codes(findings, "fail") == ["driver-drift"]
    assert "580.159.04" in findings[0].message and "branch 590" in findings[0].message


def test_driver_on_branch_is_ok_and_an_installed_newer_one_wants_a_reboot():
    loaded = {"version": "590.48.01", "flavor": "open"}
    assert codes(findings_for_driver(590, "open", loaded, "590.48.01", "590.48.01", 8)) == [
        "driver"
    ]
    findings = findings_for_driver(590, "open", loaded, "590.48.07", "590.48.01", 8)
    assert [(f.code, f.level) for f in findings] == [("driver-reboot-required", "warn")]


def test_flavor_and_userspace_mismatch_are_drift():
    loaded = {"version": "590.48.01", "flavor": "proprietary"}
    findings = findings_for_driver(590, "open", loaded, None, "590.48.07", 8)
    assert codes(findings) == ["driver-drift", "driver-drift"]
    assert (
        "proprietary" in findings[0].message and "library version mismatch" in findings[1].message
    )


def test_no_driver_at_all_is_one_clear_finding():
    assert [(f.code, f.level) for f in findings_for_driver(590, "open", None, None, None, 0)] == [
        ("driver-missing", "fail")
    ]


def test_cuda_drift():
    assert codes(findings_for_cuda("13.1", None, "/usr/local/cuda-13.1/bin/nvcc"), "fail") == [
        "cuda-drift"
    ]
    wrong = findings_for_cuda("13.1", {"release": "13.0", "version": "13.0.88"}, "/x/nvcc")
    assert codes(wrong, "fail") == ["cuda-drift"] and "CUDA 13.0" in wrong[0].message
    assert codes(
        findings_for_cuda("13.1", {"release": "13.1", "version": "13.1.80"}, "/x/nvcc")
    ) == ["cuda"]


def test_gpu_count():
    assert codes(findings_for_gpu_count(8, 2), "fail") == ["gpu-count-mismatch"]
    assert codes(findings_for_gpu_count(2, 2)) == ["gpu-count"]
    assert codes(findings_for_gpu_count(None, 8)) == ["gpu-count"]


def test_persistence_mode_off_is_a_warning():
    rows = [{**H200[0], "persistence_mode": "Disabled"}, H200[1]]
    [finding] = findings_for_persistence(rows, {"ActiveState": "inactive"})
    assert (finding.code, finding.level, finding.evidence) == (
        "persistence-mode-off",
        "warn",
        {"gpus": [0]},
    )
    assert codes(findings_for_persistence(H200, {})) == ["persistence-mode"]


def test_iommu_translation_warns_on_bare_metal_only():
    on = {"cmdline": {"intel_iommu": "on"}, "active": True}
    assert codes(findings_for_iommu(on, 8, None)) == ["iommu-translation"]
    assert findings_for_iommu(on, 8, "kvm") == []
    assert (
        findings_for_iommu(
            {"cmdline": {"intel_iommu": "on", "iommu": "pt"}, "active": True}, 8, None
        )
        == []
    )
    assert findings_for_iommu({"cmdline": {}, "active": False}, 8, None) == []


def test_iommu_state_fact_on_real_command_lines():
    facts = Path(__file__).resolve().parents[1] / "fixtures" / "facts"
    for name in ("iommu_h200_vm.txt", "iommu_ci_machine.txt"):
        # Neither VM sets IOMMU options or runs an IOMMU of its own.
        assert IommuState().process((facts / name).read_text().splitlines()) == {
            "cmdline": {},
            "active": False,
        }


def test_iommu_state_fact_parses_the_iommu_options():
    cmdline = "console=ttyS0 quiet reboot=k panic=1 pci=realloc=off intel_iommu=on iommu=pt"
    assert IommuState().process([cmdline, "### iommu_groups=12"]) == {
        "cmdline": {"intel_iommu": "on", "iommu": "pt"},
        "active": True,
    }
    assert IommuState().process(["console=ttyS0", "### iommu_groups=0"])["active"] is False


def test_sglang_version_drift():
    assert codes(findings_for_sglang_version("0.5.23", "0.5.14", "/opt/sglang/venv"), "fail") == [
        "sglang-version-drift"
    ]
    assert codes(findings_for_sglang_version("0.5.23", "0.5.23", "/opt/sglang/venv")) == [
        "sglang-version"
    ]


# --- service -------------------------------------------------------------------------------


def test_service_state():
    state = SystemdUnitState().process(
        [
            "LoadState=loaded",
            "ActiveState=activating",
            "SubState=auto-restart",
            "NRestarts=4",
            "ActiveEnterTimestamp=",
        ]
    )
    [down] = findings_for_service("sglang.service", state)
    assert (down.code, down.level) == (
        "service-down",
        "fail",
    ) and "restarted 4 times" in down.message
    assert codes(findings_for_service("sglang.service", {"LoadState": "not-found"}), "fail") == [
        "service-down"
    ]
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}
    assert codes(findings_for_service("sglang.service", running)) == ["service"]


def test_unit_drift_names_files_never_contents():
    expected = {"/etc/sglang/sglang.env": "a" * 64, "/etc/systemd/system/sglang.service": "b" * 64}
    assert codes(findings_for_unit_drift(expected, dict(expected))) == ["unit"]
    [drift] = findings_for_unit_drift(expected, {"/etc/sglang/sglang.env": "c" * 64})
    assert drift.code == "unit-drift" and drift.level == "fail"
    assert drift.evidence == {
        "changed": ["/etc/sglang/sglang.env"],
        "missing": ["/etc/systemd/system/sglang.service"],
    }


def test_decode_findings():
    good = {
        "ok": True,
        "expect": "Paris",
        "ttft_s": 0.12,
        "tokens_per_s": 48.0,
        "completion_tokens": 12,
        "reason": "pass",
    }
    [ok] = findings_for_decode(good)
    assert ok.level == "ok" and "0.12 s" in ok.message and "48.0 tok/s" in ok.message
    bad = {"ok": False, "reason": "wrong-answer", "message": "expected 'Paris', got 'Lyon'"}
    [fail] = findings_for_decode(bad)
    assert (fail.code, fail.level, fail.message) == ("decode-sanity", "fail", bad["message"])
    assert codes(findings_for_decode(None, skipped="sglang.service is not running"), "warn") == [
        "decode-sanity"
    ]


# --- report --------------------------------------------------------------------------------


def test_table_puts_failures_first_and_json_round_trips(tmp_path):
    findings = [
        Finding("ok", "cuda", "CUDA Toolkit 13.1.80."),
        Finding("warn", "pcie-gen-below-max", "GPU 1 Gen1 of Gen5", gpu=1),
        Finding("fail", "driver-drift", "runs 580", evidence={"loaded": "580.159.04"}),
    ]
    table = format_table("gpu-1", findings).splitlines()
    assert table[0] == "audit of gpu-1: FAIL (1 fail, 1 warn, 1 ok)"
    assert [line.split()[1] for line in table[2:]] == ["driver-drift", "pcie-gen-below-max", "cuda"]
    path = write_report(tmp_path / "r" / "gpu-1.json", report("gpu-1", findings, {"gpus": []}))
    data = json.loads(path.read_text())
    assert data["result"] == "fail" and data["findings"][1] == {
        "level": "warn",
        "code": "pcie-gen-below-max",
        "message": "GPU 1 Gen1 of Gen5",
        "gpu": 1,
    }
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("@local", "local.json"),
        ("gpu-1.example.org", "gpu-1.example.org.json"),
        ("@docker/abc", "docker_abc.json"),
    ],
)
def test_report_file_names_are_safe(name, file):
    from checks.audit import report_file_name

    assert report_file_name(name) == file


# --- offline analysis and the real audit report ---------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_smi_q_parses_to_the_query_rows_of_the_same_machine():
    from pyinfra_sglang.parsers.nvidia_smi import parse_smi_q

    smi_q = (FIXTURES / "gpu" / "h200x2-nvlink-vm" / "smi_q.txt").read_text().splitlines()
    keys = (
        "index",
        "name",
        "pci.bus_id",
        "driver_version",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "pcie.link.width.current",
        "pcie.link.width.max",
        "persistence_mode",
    )
    assert [{k: r[k] for k in keys} for r in parse_smi_q(smi_q)] == [
        {k: r[k] for k in keys} for r in H200
    ]
    rtx = parse_smi_q(
        (FIXTURES / "gpu" / "smiq_8x_rtxpro6000_server_driver595_full.txt").read_text().splitlines()
    )
    assert [r["pcie.link.gen.current"] for r in rtx] == ["1"] * 8 and rtx[7][
        "pci.bus_id"
    ] == "00000000:F5:00.0"


def test_analyze_cli_json_on_captured_files(tmp_path, capsys):
    from pyinfra_sglang.cli.main import main

    topo = tmp_path / "topo.txt"
    topo.write_text("\n".join(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m")))
    query = tmp_path / "query.csv"
    # Two samples in one file: the idle RTX reading first, then the H200s: the last is judged.
    query.write_text(
        "\n".join(
            captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY)
            + captured_lines("h200x2-nvlink-vm", QUERY)
        )
    )
    p2p = tmp_path / "p2p.txt"
    p2p.write_text("\n".join(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r")))
    assert (
        main(
            ["analyze", "--topo", str(topo), "--p2p", str(p2p), "--query-csv", str(query), "--json"]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["p2p"] == {"matrix": H200_P2P, "ok": True}
    assert [g["name"] for g in result["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert result["gpus"][1]["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
    }
    assert (
        result["topology"]["nvlink"] is True
        and result["topology"]["matrix"]["GPU1"]["GPU0"] == "NV18"
    )
    assert {f["code"] for f in result["findings"]} == {
        "pcie-links",
        "persistence-mode",
        "topology",
        "p2p",
    }


def test_analyze_cli_exits_1_on_a_degraded_link_and_names_it(tmp_path, capsys):
    from pyinfra_sglang.cli.main import main

    query = tmp_path / "query.csv"
    query.write_text("\n".join(captured_lines("rtxpro6000x8-pcie-x8-of-x16", QUERY)))
    assert main(["analyze", "--query-csv", str(query)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"analysis of {query}: FAIL")
    assert any(
        line.split()[:3] == ["fail", "pcie-width-degraded", "5"] for line in out.splitlines()[2:]
    )
    assert main(["analyze"]) == 2


@pytest.mark.parametrize(
    ("run", "load"), [("default", "none"), ("copy-load", "copy"), ("link-probe", "probe")]
)
def test_the_real_h200_audit_report_is_what_the_checks_say_of_its_facts(run, load):
    report_data = json.loads(
        (FIXTURES / "audit" / "h200x2-nvlink-vm" / f"report-{run}.json").read_text()
    )
    facts = report_data["facts"]
    assert report_data["result"] == "fail"
    fails = {f["code"] for f in report_data["findings"] if f["level"] == "fail"}
    # Nothing deployed there: driver and CUDA of other releases, no SGLang, service or model.
    assert fails == {
        "driver-drift",
        "cuda-drift",
        "sglang-version-drift",
        "service-down",
        "model-missing",
    }
    # The same checks, run again here on the facts the real run recorded, agree with it.
    driver = facts["driver"]
    again = findings_for_driver(
        590, "open", driver["loaded"], driver["installed"], driver["userspace"], 2
    )
    again += findings_for_topology(facts["topology"]["matrix"], 2)
    again += findings_for_p2p(facts["p2p"]["matrix"], 2, None)
    recorded = {(f["code"], f["level"]) for f in report_data["findings"]}
    assert {(f.code, f.level) for f in again} <= recorded
    assert facts["load"]["kind"] == load


SAMPLED_LOAD = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200-sampled-load"


def recorded_run(name: str) -> dict:
    return parse_gpu_query_under_load((SAMPLED_LOAD / name).read_text().splitlines())


def test_a_recorded_copy_load_on_an_h200_reads_its_link_at_gen5_x16():
    run = recorded_run("copy-load.txt")
    assert run["load_rc"] == 0 and run["load_output"] == [
        '{"gpus": [{"index": 0, "h2d_gbs": 53.8}]}'
    ]
    assert len(run["samples"]) == 41 and all(len(sample) == 1 for sample in run["samples"])
    reading = after_load(GpuLoadReading(), "copy", run)
    assert (reading.kind, reading.probe, reading.probe_failure) == (
        "copy",
        {"gpus": [{"index": 0, "h2d_gbs": 53.8}]},
        None,
    )
    assert links_under_load(reading.samples)[0]["gen_current"] == 5
    findings = findings_for_links(run["samples"][0], reading.samples, reading.kind)
    assert findings and worst_level(findings) == "ok"
    assert {f.evidence["read"] for f in findings} == {"under load"}


def test_a_recorded_failed_load_keeps_the_reading_before_and_says_why_for_the_probe():
    run = recorded_run("failed-load.txt")
    assert (run["load_rc"], run["load_output"]) == (3, ["the load failed"])
    decoded = GpuLoadReading(kind="decode", samples=[H200], decode={"ok": True})
    probe = after_load(decoded, "probe", run)
    assert (probe.kind, probe.samples, probe.decode) == ("decode", [H200], {"ok": True})
    assert probe.probe_failure == "exit 3: the load failed"
    # A copy load that could not run is no finding: no failure recorded.
    assert after_load(GpuLoadReading(), "copy", run) == GpuLoadReading()


def test_a_decode_prompt_counts_as_load_only_when_it_answered():
    samples = recorded_run("copy-load.txt")["samples"]
    answered = {
        "load_rc": 0,
        "load_output": ['{"ok": true, "answer": "Paris"}'],
        "samples": samples,
    }
    assert after_decode(answered) == GpuLoadReading(
        kind="decode", samples=samples, decode={"ok": True, "answer": "Paris"}
    )
    silent = {"load_rc": 1, "load_output": ["Traceback", "boom"], "samples": samples}
    reading = after_decode(silent)
    assert (reading.kind, reading.samples) == ("none", [])
    assert reading.decode["reason"] == "protocol-error"
    assert "exit 1: Traceback boom" in reading.decode["message"]


@pytest.mark.parametrize(
    ("kind", "link_probe", "torch", "expected"),
    [
        ("none", False, True, "copy"),
        ("none", True, True, "probe"),
        ("decode", False, True, None),  # the prompt loaded the GPUs already
        ("decode", True, True, "probe"),
        ("none", True, False, None),  # no torch, no load
    ],
)
def test_which_load_runs_next(kind, link_probe, torch, expected):
    assert needs_load(GpuLoadReading(kind=kind), link_probe, torch) == expected
