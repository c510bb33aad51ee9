"""pyinfra_sglang/host_programs/gpu_sampler.py, run end to end against the pynvml test double.

The double (tests/doubles/pynvml.py) replays the real 2x H200 captures; the sampler runs as a
subprocess with the double first on PYTHONPATH, as it would run on a host with the real one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLER = ROOT / "pyinfra_sglang" / "host_programs" / "gpu_sampler.py"
DOUBLES = ROOT / "tests" / "doubles"
CAPTURE = ROOT / "tests" / "fixtures" / "gpu" / "h200x2-nvlink-vm"
ROWS = json.loads((CAPTURE / "samples.json").read_text())
MARKER = "busy-loop-for-sampler-test"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(DOUBLES), **extra}


def _run_sampler(*args: str, **env: str) -> tuple[list[dict], str, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SAMPLER), *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr, elapsed


@pytest.fixture(scope="module")
def sampled():
    """One second of samples at 0.1 s, with a busy process whose command line matches."""
    busy = subprocess.Popen(
        [sys.executable, "-c", f"# {MARKER}\nwhile True: pass"], stdout=subprocess.DEVNULL
    )
    try:
        lines, stderr, elapsed = _run_sampler(
            "--duration", "1.0", "--interval", "0.1", "--cpu-pattern", MARKER
        )
    finally:
        busy.kill()
        busy.wait()
    return lines, stderr, elapsed


def test_double_has_only_real_pynvml_names():
    import pynvml as real  # the installed nvidia-ml-py: no GPU needed to import it

    spec = importlib.util.spec_from_file_location("pynvml_double", DOUBLES / "pynvml.py")
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    functions = [n for n in vars(double) if n.startswith("nvml")]
    constants = [n for n in vars(double) if n.startswith("NVML_")]
    assert "nvmlDeviceGetPcieThroughput" in functions and len(constants) > 10
    assert [n for n in functions if not callable(getattr(real, n, None))] == []
    assert {n: getattr(double, n) for n in constants} == {n: getattr(real, n) for n in constants}


def test_samples_are_bounded_by_the_duration(sampled):
    lines, _, elapsed = sampled
    times = [line["t"] for line in lines]
    # 10 ticks of 0.1 s in 1 s; a slow machine may skip some, never add any.
    assert 5 <= len(lines) <= 10
    # Ticks fall due at 0.1 .. 1.0 s; a loaded machine may take a little longer to read one.
    assert times == sorted(times) and times[0] >= 0.09 and times[-1] <= 1.5
    assert elapsed < 1.0 + 5  # interpreter start-up and NVML set-up included


def test_each_sample_replays_the_capture_row_it_read(sampled):
    lines, _, _ = sampled
    for k, line in enumerate(lines):
        row = ROWS[k % len(ROWS)]
        assert [g["index"] for g in line["gpus"]] == [0, 1]
        for gpu in line["gpus"]:
            util, mem, tx, rx, clock, power_mw = row[str(gpu["index"])]
            assert (gpu["gpu_util"], gpu["mem_util"]) == (util, mem)
            assert (gpu["pcie_tx_kbps"], gpu["pcie_rx_kbps"]) == (tx, rx)
            assert gpu["sm_clock_mhz"] == clock
            assert gpu["power_w"] == pytest.approx(power_mw / 1000)


def test_static_readings_come_from_the_real_capture(sampled):
    lines, _, _ = sampled
    gpu = lines[0]["gpus"][0]
    assert gpu["name"] == "NVIDIA H200"
    assert (gpu["pcie_gen"], gpu["pcie_width"], gpu["pcie_gen_max"], gpu["pcie_width_max"]) == (
        5,
        16,
        5,
        16,
    )
    assert (gpu["power_limit_w"], gpu["sm_clock_max_mhz"], gpu["memory_used_mib"]) == (700, 1980, 0)


def test_nvlink_counters_are_recorded_raw_with_their_names_every_nvlink_interval():
    # Costly reads (~28 ms of system CPU on an H200): every 0.3 s here, not every 0.1 s sample.
    lines, _, _ = _run_sampler("--duration", "1.0", "--interval", "0.1", "--nvlink-interval", "0.3")
    read = [line for line in lines if line["gpus"][1]["nvlink_raw"] is not None]
    assert 3 <= len(read) <= 4 < len(lines)
    assert all(b["t"] - a["t"] >= 0.25 for a, b in zip(read, read[1:]))
    for k, line in enumerate(read):
        gpu = line["gpus"][1]
        assert gpu["nvlink_links"] == 18  # all 18 links of the capture are up
        # The double's synthetic counters: k-th read, per link TX k*1024, RX k*512 (KiB).
        assert gpu["nvlink_raw"] == {
            "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX": k * 1024 * 18,
            "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX": k * 512 * 18,
        }


def test_cpu_of_matching_processes_is_sampled(sampled):
    lines, _, _ = sampled
    cpu = [line["cpu"] for line in lines]
    # The busy loop only: the sampler's own process is left out although its arguments match.
    assert {c["processes"] for c in cpu} == {1}
    busy = sorted(c["percent"] for c in cpu)[len(cpu) // 2]
    assert busy > 30  # a spinning process on a shared CI core still shows well above idle
    assert all(c["max_process_percent"] == c["percent"] for c in cpu)


def test_failing_optional_readings_become_null_and_are_reported_once():
    lines, stderr, _ = _run_sampler(
        "--duration",
        "0.5",
        "--interval",
        "0.1",
        "--nvlink-interval",
        "0.1",
        PYNVML_DOUBLE_FAIL="nvmlDeviceGetPowerUsage,nvmlDeviceGetFieldValues:argerror",
    )
    assert len(lines) >= 3
    for line in lines:
        for gpu in line["gpus"]:
            assert gpu["power_w"] is None
            assert set(gpu["nvlink_raw"].values()) == {None}  # asked for, failed
            assert gpu["gpu_util"] is not None  # the other readings go on
    assert stderr.count("power unavailable: Not Supported") == 2  # once per GPU
    assert stderr.count("nvlink_throughput unavailable: argument 3") == 2


def test_sigterm_stops_sampling_cleanly():
    process = subprocess.Popen(
        [sys.executable, str(SAMPLER), "--duration", "60", "--interval", "0.1"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = process.stdout.readline()
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=5)
    assert process.returncode == 0
    lines = [json.loads(line) for line in [first, *rest.splitlines()]]
    assert lines[-1]["t"] < 10


def test_bad_interval_is_refused():
    done = subprocess.run(
        [sys.executable, str(SAMPLER), "--interval", "0"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "must be positive" in done.stderr


def _fake_process(proc: Path, pid: int, cmdline: str, ticks: int, parent: int = 1) -> None:
    folder = proc / str(pid)
    folder.mkdir(exist_ok=True)
    folder.joinpath("cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    # A command name with spaces and parentheses, as Python threads may have; the parent pid is
    # field 4, utime field 14 and stime field 15 (split here as ticks and 0).
    fields = ["S", str(parent)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 20
    folder.joinpath("stat").write_text(f"{pid} (py (thr) x) " + " ".join(fields) + "\n")


def test_process_cpu_reads_proc(tmp_path):
    # Process ids above Linux's largest pid_max (2^22): never this test's own.
    from pyinfra_sglang.host_programs.gpu_sampler import DEFAULT_CPU_EXCLUDE, ProcessCpu

    server, worker = 5000101, 5000102
    _fake_process(tmp_path, server, "python -m sglang.launch_server --tp 8", 1000)
    # A worker the server spawned: its command line does not say sglang, its parent does.
    _fake_process(tmp_path, worker, "python -c from multiprocessing.spawn", 50, parent=server)
    _fake_process(tmp_path, 5000103, "python -m sglang.bench_serving --num-prompts 9", 0)
    _fake_process(tmp_path, 5000104, "bash", 0)
    (tmp_path / "self").mkdir()
    cpu = ProcessCpu("sglang", DEFAULT_CPU_EXCLUDE, proc=str(tmp_path))
    assert set(cpu.last) == {server, worker}  # the benchmark client and bash are left out
    ticks = os.sysconf("SC_CLK_TCK")
    _fake_process(tmp_path, server, "python -m sglang.launch_server --tp 8", 1000 + ticks // 2)
    _fake_process(tmp_path, worker, "python -c from multiprocessing.spawn", 50 + 2 * ticks, server)
    cpu.last_time = time.monotonic() - 2.0  # two seconds passed
    reading = cpu.read()
    assert reading["processes"] == 2
    assert reading["percent"] == pytest.approx(125, abs=1)  # 25% + 100% of one core
    assert reading["max_process_percent"] == pytest.approx(100, abs=1)
