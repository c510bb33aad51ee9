"""GPU health: parsers and judges on the real H200 capture and public outputs
(tests/fixtures/gpu/h200-health/, tests/fixtures/gpu/public/, each README names the source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyinfra_sglang.audit.analyze import analyze
from pyinfra_sglang.audit.health import findings_for_clocks, findings_for_gpu_health
from pyinfra_sglang.parsers.gpu_health import (
    parse_health_q,
    parse_nvlink_errors,
    parse_xid_lines,
    pci_key,
)
from pyinfra_sglang.parsers.nvidia_smi import parse_gpu_query_samples, parse_gpu_query_under_load

GPU = Path(__file__).parents[1] / "fixtures" / "gpu"
PUBLIC = GPU / "public"


def public(name: str) -> list[str]:
    lines = (PUBLIC / name).read_text().splitlines()
    assert lines[0].startswith("# source: ")
    return lines[1:]


def block(path: Path, command: str) -> list[str]:
    """One command's output of a capture_health.sh file ("### <command>" ... "### rc=N")."""
    lines = path.read_text().splitlines()
    start = lines.index(f"### {command}") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("### rc="))
    return lines[start:end]


H200 = GPU / "h200-health" / "health.txt"
H200_Q = "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE,CLOCK"


def codes(findings) -> dict[str, str]:
    return {f.code: f.level for f in findings}


def test_the_real_h200_reads_clean_and_says_what_it_read():
    memory = parse_health_q(block(H200, H200_Q))
    assert memory[0]["pci"] == "00000000:00:06.0"
    assert memory[0]["dram_uncorrectable_volatile"] == 0 and memory[0]["remap_pending"] is False
    assert memory[0]["retired_single_bit"] is None  # N/A on an H200: not read, not 0
    dmesg = block(H200, "sh -c dmesg 2>&1 | grep -i -E 'NVRM|xid' | tail -n 50")
    xids = parse_xid_lines(dmesg)
    assert dmesg and xids == []  # NVRM lines, none of them an Xid
    nvlink = parse_nvlink_errors(block(H200, "nvidia-smi nvlink -e"))
    assert nvlink == {}  # one GPU: no links
    gpus = [{"index": "0", "pci.bus_id": "00000000:00:06.0"}]
    findings = findings_for_gpu_health(gpus, xids, memory, nvlink, [], "none")
    assert [f.code for f in findings] == ["gpu-health"]
    assert "no NVLink" in findings[0].message and "1 GPU(s)" in findings[0].message


def test_nothing_read_is_no_finding_and_never_a_pass():
    assert findings_for_gpu_health([{"index": "0"}], None, None, None, [], "decode") == []


def test_xid_lines_in_every_log_shape_name_their_gpu():
    assert parse_xid_lines(public("xid_79_pid0_journalctl.txt")) == [
        {"pci": "0000:10:00", "xid": 79, "detail": "pid=0, GPU has fallen off the bus."}
    ]
    mig = parse_xid_lines(public("xid_94_contained_mig_nvidia_doc.txt"))
    assert [(e["pci"], e["xid"]) for e in mig] == [("0000:01:00", 94)]
    gsp = parse_xid_lines(public("xid_119_gsp_timeout_dmesg_T.log"))  # dmesg -T
    assert {(e["pci"], e["xid"]) for e in gsp} == {("0000:9b:00", 119)} and len(gsp) == 5
    assert pci_key("00000000:9B:00.0") == pci_key("0000:9b:00") == "0000:9b:00"


def test_fatal_xids_fail_with_the_catalogue_meaning_and_action():
    gpus = [{"index": "3", "pci.bus_id": "00000000:10:00.0"}]
    (finding,) = findings_for_gpu_health(
        gpus, parse_xid_lines(public("xid_79_pid0_journalctl.txt")), None, None, [], "none"
    )
    assert (finding.level, finding.code, finding.gpu) == ("fail", "gpu-xid", 3)
    assert "fallen off the bus" in finding.message and "reboot the host" in finding.message
    assert finding.evidence["action"] == "reboot"


def test_xid_154_takes_the_action_its_line_names():
    events = parse_xid_lines(public("xid_154_149_gb200_kmsg.txt"))
    findings = findings_for_gpu_health([], events, None, None, [], "none")
    actions = {(f.evidence["pci"], f.evidence["xid"]): f.evidence["action"] for f in findings}
    assert actions == {
        ("0009:01:00", 154): "drain-reset",
        ("0019:01:00", 154): "reset",
        ("0008:01:00", 149): "drain-reset",
    }
    assert {f.level for f in findings} == {"fail"}


def test_xid_45_warns_and_follows_the_xid_behind_it():
    findings = findings_for_gpu_health(
        [], parse_xid_lines(public("xid_45_after_149_145_journalctl.txt")), None, None, [], "none"
    )
    assert [f.level for f in findings] == ["warn"] * 4
    assert all("caused by previous Xid" in f.evidence["last"] for f in findings)
    # Not alone (each names the Xid behind it): follow that one, not Fabric Manager.
    assert {f.evidence["action"] for f in findings} == {"none"}


def test_xid_45_alone_means_restarting_fabric_manager():
    # NVIDIA's catalogue, WORKFLOW_XID_45: alone, RESTART_FM; with other Xids, follow them.
    # The real line without the words naming the Xid behind it, and no other Xid read.
    line = public("xid_45_after_149_145_journalctl.txt")[1].split(" caused by")[0]
    [finding] = findings_for_gpu_health([], parse_xid_lines([line]), None, None, [], "none")
    assert finding.level == "warn" and finding.evidence["action"] == "restart-fm"
    assert "systemctl restart nvidia-fabricmanager" in finding.message
    # With another Xid in the read, it is no longer alone.
    other = "kernel: NVRM: Xid (PCI:0000:dc:00): 79, pid=0, GPU has fallen off the bus."
    findings = findings_for_gpu_health([], parse_xid_lines([line, other]), None, None, [], "none")
    assert {f.evidence["xid"]: f.evidence["action"] for f in findings}[45] == "none"


def test_pending_row_remap_warns_drain_and_reset():
    memory = parse_health_q(public("remapped_rows_pending_gpud_pr80.txt"))
    assert memory[0]["remapped_uncorrectable"] == 4 and memory[0]["remap_pending"] is True
    findings = findings_for_gpu_health([], None, memory, None, [], "none")
    # The capture is the Remapped Rows section alone: its ECC counters were never read.
    assert codes(findings) == {"row-remap-pending": "warn", "gpu-health-unread": "warn"}
    assert "drain and reset" in findings[0].message
    assert "uncorrectable ECC counters were not read" in findings[1].message


def test_failed_remap_and_uncorrectable_ecc_fail():
    lines = block(H200, H200_Q)
    broken = [
        line.replace(
            "DRAM Uncorrectable                         : 0", "DRAM Uncorrectable : 2"
        ).replace(
            "Remapping Failure Occurred                     : No",
            "Remapping Failure Occurred : Yes",
        )
        for line in lines
    ]
    findings = findings_for_gpu_health([], None, parse_health_q(broken), None, [], "none")
    assert codes(findings) == {"ecc-uncorrectable": "fail", "row-remap-failed": "fail"}
    assert any("replace the GPU" in f.message for f in findings)


def test_nvlink_counters_not_zero_warn_per_gpu():
    counters = parse_nvlink_errors(public("nvlink_e_v100_crc_replay.txt"))
    assert counters == {
        "0": {"3": {"replay errors": 2353}},
        "2": {"0": {"replay errors": 148, "crc errors": 65535}},
    }
    findings = findings_for_gpu_health([], None, None, counters, [], "none")
    assert [(f.code, f.gpu) for f in findings] == [("nvlink-errors", 0), ("nvlink-errors", 2)]
    zero = parse_nvlink_errors(public("nvlink_e_h100_zero.txt"))
    assert len(zero["0"]) == 3
    (ok,) = findings_for_gpu_health([], None, None, zero, [], "none")
    assert ok.code == "gpu-health" and "3 link(s)" in ok.message


def test_clock_reasons_are_judged_only_under_load():
    csv = block(
        H200,
        "nvidia-smi --query-gpu=index,pci.bus_id,clocks_event_reasons.active,"
        "clocks_event_reasons.gpu_idle,clocks_event_reasons.applications_clocks_setting,"
        "clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,"
        "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
        "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sync_boost,clocks.sm,"
        "temperature.gpu,power.draw --format=csv",
    )
    samples = parse_gpu_query_samples(csv)
    assert samples[0][0]["clocks_event_reasons.gpu_idle"] == "Active"  # idle: no finding
    assert findings_for_clocks(samples, "none") == ([], 0)
    assert findings_for_clocks(samples, "copy") == ([], 1)
    held = [[{**samples[0][0], "clocks_event_reasons.hw_slowdown": "Active"}]]
    (finding,), read = findings_for_clocks(held, "decode")
    assert (finding.code, finding.level, finding.gpu, read) == ("clock-throttled", "warn", 0, 1)


def test_the_sampled_load_reads_clock_reasons_and_old_runs_still_parse():
    old = ["### load rc=0", "{}", "### samples", "index, name", "0, H200"]
    assert parse_gpu_query_under_load(old)["clock_reasons"] == []
    new = old + ["### clock reasons", "index, clocks_event_reasons.hw_slowdown", "0, Not Active"]
    run = parse_gpu_query_under_load(new)
    assert run["samples"] == [[{"index": "0", "name": "H200"}]]
    assert run["clock_reasons"] == [
        [{"index": "0", "clocks_event_reasons.hw_slowdown": "Not Active"}]
    ]


def test_analyze_names_each_xid_with_its_gpu_from_the_smi_q():
    smi_q = (GPU / "h200x2-nvlink-vm" / "smi_q.txt").read_text().splitlines()
    kernel = ["[ 5.1] NVRM: Xid (PCI:0000:00:07): 48, pid=1, DBE (0x1) detected"]
    result = json.loads(json.dumps(analyze(smi_q=smi_q, kernel_log=kernel)))
    (xid,) = [f for f in result["findings"] if f["code"] == "gpu-xid"]
    assert xid["gpu"] == 1 and xid["level"] == "fail" and result["result"] == "fail"
    assert "Double Bit ECC Error" in xid["message"]


HUGE = "9" * 5000  # past int()'s 4300-digit limit: a bare int() raised ValueError


def test_gpu_indexes_no_gpu_could_have_are_judged_not_crashed():
    """Hostile or broken indexes reach the judges from nvidia-smi, dcgmi and the kernel log's
    text: each finding still comes, with no GPU number where the text is not one (issue 46)."""
    from pyinfra_sglang.audit.health import findings_for_dcgm, gpu_number
    from pyinfra_sglang.parsers.dcgm import parse_dcgm_diag

    assert [gpu_number(t) for t in ("0", " 7 ", "1234", "12345", HUGE, "٣", "-1", "", "x")] == [
        0, 7, 1234, None, None, None, None, None, None,
    ]  # fmt: skip
    counters = {HUGE: {"0": {"crc errors": 1}}, "1": {HUGE: {"replay errors": 2}}}
    findings = findings_for_gpu_health([], None, None, counters, [], "none")
    assert [(f.code, f.gpu) for f in findings] == [("nvlink-errors", 1), ("nvlink-errors", None)]
    held = [[{"index": "abc", "clocks_event_reasons.hw_slowdown": "Active"}]]
    (finding,), _ = findings_for_clocks(held, "decode")
    assert (finding.code, finding.gpu) == ("clock-throttled", None)
    table = [
        "+-----  Hardware  ----------+------------------------------------------------+",
        f"| GPU Memory                | Fail - GPU: {HUGE} |",
    ]
    diag = {"present": True, "level": 2, "rc": 0, **parse_dcgm_diag(table), "head": []}
    [failed] = findings_for_dcgm(diag)
    assert (failed.level, failed.code, failed.gpu) == ("fail", "dcgm-diag", None)


def _ecc_lines(value: str) -> list[str]:
    """The real H200 -q block, each uncorrectable ECC counter replaced by ``value``."""
    lines = block(H200, H200_Q)
    out = []
    for line in lines:
        key, colon, _ = line.partition(":")
        out.append(f"{key}: {value}" if colon and "Uncorrectable" in key else line)
    return out


@pytest.mark.parametrize(
    ("case", "lines"),
    [
        ("ECC disabled: every counter N/A", lambda: _ecc_lines("N/A")),
        ("every counter NaN", lambda: _ecc_lines("nan")),
        ("every counter negative", lambda: _ecc_lines("-1")),
        (
            "no ECC, remap or retired-page section",
            lambda: [
                line
                for line in block(H200, H200_Q)
                if not any(s in line for s in ("Uncorrectable", "Remap", "Retired", "Pending"))
            ],
        ),
    ],
)
def test_ecc_counters_not_read_are_never_an_ok(case, lines):
    """Issue 47: analyze --smi-q said "ok gpu-health: no uncorrectable ECC error" for each of
    these; the GPU's memory errors are unknown, and the finding says so."""
    memory = parse_health_q(lines())
    findings = findings_for_gpu_health([], None, memory, None, [], "none")
    assert [(f.level, f.code) for f in findings] == [("warn", "gpu-health-unread")] * len(memory)
    assert all("ECC counters were not read" in f.message for f in findings)


def test_ecc_read_on_every_gpu_is_an_ok_that_says_how_many():
    memory = parse_health_q(block(H200, H200_Q))
    [ok] = findings_for_gpu_health([], None, memory, None, [], "none")
    assert ok.code == "gpu-health" and f"on the {len(memory)} of {len(memory)} GPU(s)" in ok.message


def test_a_capture_with_no_gpu_is_a_warning():
    [unread] = findings_for_gpu_health([], None, [], None, [], "none")
    assert (unread.level, unread.code) == ("warn", "gpu-health-unread")
    assert "no GPU section" in unread.message


def test_a_flood_of_one_xid_never_pushes_a_rarer_one_out_of_the_audits_read(tmp_path):
    """Issue 47: the audit kept the kernel log's last 2000 Xid lines, so 3000 Xid 13 (any GPU
    user can cause them) after one Xid 79 hid the 79, while the line said "since boot". The
    fact's own shell command, run here on such a log in place of dmesg."""
    import subprocess

    from checks.facts import KernelXids
    from pyinfra_sglang.audit.health import findings_for_xids

    log = tmp_path / "kern.log"
    flood = "[{t}.000000] NVRM: Xid (PCI:0000:10:00): 13, pid=42, Graphics Exception\n"
    log.write_text(
        "".join(flood.format(t=n) for n in range(50))
        + "[99.0] NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.\n"
        + "".join(flood.format(t=100 + n) for n in range(3000))
    )
    fact = KernelXids()
    out = subprocess.run(
        ["sh", "-c", kernel_log_command(fact, dmesg=log)],
        capture_output=True,
        text=True,
        check=True,
    )
    read = fact.process(out.stdout.splitlines())
    # Bounded: 19 + the total line, the 79, and what was read.
    assert len(out.stdout.splitlines()) == 22
    assert read["read"] == "the kernel's ring buffer (dmesg), from boot, 3,051 lines"
    by_xid = {f.evidence["xid"]: f for f in findings_for_xids(read["events"], [])}
    assert by_xid[79].level == "fail" and by_xid[79].evidence["count"] == 1
    assert by_xid[13].evidence["count"] == 3050 and "(3050 times)" in by_xid[13].message
    assert by_xid[13].evidence["last"].startswith("pid=42")


JOURNAL = "journalctl -k -b --no-pager -q -o short-iso"


def kernel_log_command(fact, journal=None, dmesg=None) -> str:
    """KernelXids' command with journald's and dmesg's output replaced by files (None: that
    source gives nothing), so the test reads no log of this machine."""
    command = fact.command().replace(JOURNAL, f"cat {journal}" if journal else "true")
    command = command.replace("dmesg >/dev/null 2>&1", "true" if dmesg else "false")
    return command.replace("dmesg 2>/dev/null", f"cat {dmesg}" if dmesg else "true")


def test_the_audit_reads_journald_first_and_says_what_it_read(tmp_path):
    import subprocess

    from checks.facts import KernelXids
    from pyinfra_sglang.audit.health import findings_for_gpu_health

    journal = tmp_path / "journal.log"
    journal.write_text(
        "2026-12-06T05:00:01+0000 gpu-01 kernel: Linux version 6.1.0-28-amd64\n"
        "2026-12-06T05:00:09+0000 gpu-01 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module\n"
    )
    ring = tmp_path / "dmesg.log"
    ring.write_text("[ 3612.000001] NVRM: Xid (PCI:0000:10:00): 79, pid=0, fallen off the bus.\n")
    fact = KernelXids()

    def read(**sources):
        command = kernel_log_command(fact, **sources)
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
        return fact.process(out.stdout.splitlines())

    # journald first: the ring buffer is not read where journald has this boot's lines.
    found = read(journal=journal, dmesg=ring)
    assert found == {
        "events": [],
        "read": "journald's kernel messages of this boot, since 2026-12-06T05:00:01+0000, 2 lines",
    }
    [ok] = findings_for_gpu_health([{"index": "0"}], found, None, None, [], "none")
    assert ok.level == "ok" and found["read"] in ok.message
    # No journal: the ring buffer, which says how far back it reaches.
    ring_read = read(dmesg=ring)
    assert ring_read["read"] == (
        "the kernel's ring buffer (dmesg), from 3,612 s after boot (older lines were "
        "dropped before it), 1 line"
    )
    assert [e["xid"] for e in ring_read["events"]] == [79]
    # Neither: nothing read, no finding from it (the audit says the log was not read).
    assert read() is None
