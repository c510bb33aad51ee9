"""The benchmark's plan: which module per SGLang release (data), settings and their hash, the
benchmark's arguments (real bench_serving flag names) and the script run on the host."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyinfra_sglang.host_programs import program_path
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.served_benchmark.bench_serving import bench_module, run_settings
from pyinfra_sglang.served_benchmark.settings import bench_args, bench_script, bench_settings
from pyinfra_sglang.serving.service_files import server_url

API_KEY = "sk-site-APIKEY-0123456789"
# The stand-in runs on test hosts as the package ``sglang``; its files are read from here.
STANDIN = (
    Path(__file__).resolve().parents[1] / "hosts" / "standins" / "sglang" / "sglang" / "_standin"
)


@pytest.mark.parametrize(
    ("version", "module"),
    [
        ("0.5.5", "sglang.bench_serving"),
        ("0.5.9.post1", "sglang.bench_serving"),
        ("0.5.14", "sglang.bench_serving"),
        ("0.5.15", "sglang.benchmark.serving"),
        # The real 0.5.17 on the H200 warns that sglang.bench_serving is deprecated.
        ("0.5.17", "sglang.benchmark.serving"),
        ("0.5.23", "sglang.benchmark.serving"),
    ],
)
def test_benchmark_module_per_release(version, module):
    assert bench_module(version) == module


def test_the_stand_in_moves_its_benchmark_where_the_data_says():
    # tests/hosts/standins/sglang copies the boundary by hand; both must agree.
    [moved] = re.findall(r'^BENCH_MOVED = "([\d.]+)"$', (STANDIN / "releases.py").read_text(), re.M)
    assert bench_module(moved) == "sglang.benchmark.serving"
    major_minor, patch = moved.rsplit(".", 1)
    assert bench_module(f"{major_minor}.{int(patch) - 1}") == "sglang.bench_serving"


def test_fixed_settings_measure_fixed_lengths_without_downloads():
    fixed = run_settings()
    assert (fixed.backend, fixed.dataset, fixed.range_ratio) == (
        "sglang-oai-chat",
        "random-ids",
        1.0,
    )


def config(**values) -> HostConfig:
    return HostConfig(**values)


def test_settings_hash_is_stable_and_changes_with_any_setting():
    base = bench_settings(config(sglang_profile_overrides={"a": 1, "b": 2}), "0.5.23")
    same = bench_settings(config(sglang_profile_overrides={"b": 2, "a": 1}), "0.5.23")
    assert base.digest() == same.digest()
    assert len(base.digest()) == 16 and re.fullmatch(r"[0-9a-f]{16}", base.digest())
    others = [
        bench_settings(config(bench_concurrencies=[1, 8]), "0.5.23"),
        bench_settings(config(bench_input_len=128), "0.5.23"),
        bench_settings(config(bench_output_len=512), "0.5.23"),
        bench_settings(config(bench_prompts_per_concurrency=2), "0.5.23"),
        bench_settings(config(bench_repeat=3), "0.5.23"),
        bench_settings(config(sglang_model_profile="dense-bf16"), "0.5.23"),
        bench_settings(config(sglang_profile_overrides={"cuda_graph": False}), "0.5.23"),
        bench_settings(config(), "0.5.22"),
    ]
    digests = {s.digest() for s in [bench_settings(config(), "0.5.23"), *others]}
    assert len(digests) == len(others) + 1
    # The threshold and the results folder are not settings of the measurement.
    assert (
        bench_settings(config(bench_regression_pct=5, bench_results_dir="x"), "0.5.23").digest()
        == bench_settings(config(), "0.5.23").digest()
    )


def test_prompts_are_a_multiple_of_the_concurrency_and_at_least_eight():
    settings = bench_settings(config(bench_prompts_per_concurrency=4), "0.5.23")
    assert [settings.num_prompts(c) for c in (1, 2, 8, 32)] == [8, 8, 32, 128]


def test_server_url_is_the_hosts_own_server():
    assert server_url(config()) == "http://127.0.0.1:30000"
    key = {"sglang_api_key_file": "/k"}
    assert (
        server_url(config(sglang_host="0.0.0.0", sglang_port=31000, **key))
        == "http://127.0.0.1:31000"
    )
    assert server_url(config(sglang_host="10.0.0.5", **key)) == "http://10.0.0.5:30000"
    assert server_url(config(sglang_host="fd00::5", **key)) == "http://[fd00::5]:30000"


def real_flags() -> set[str]:
    """Flags of the stand-in's parser, which copies python/sglang/bench_serving.py's (its
    module needs only the standard library)."""
    spec = importlib.util.spec_from_file_location("standin_bench", STANDIN / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    parser = module.build_parser("x")
    return {option for action in parser._actions for option in action.option_strings}


def test_benchmark_arguments_use_real_flag_names():
    settings = bench_settings(config(bench_input_len=300, bench_output_len=20), "0.5.23")
    args = bench_args(settings, "http://127.0.0.1:30000", "bench.jsonl")
    flags = [a for a in args if a.startswith("--")]
    assert set(flags) <= real_flags()
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs == {
        "--backend": "sglang-oai-chat",
        "--base-url": "http://127.0.0.1:30000",
        "--dataset-name": "random-ids",
        "--random-input-len": "300",
        "--random-output-len": "20",
        "--random-range-ratio": "1.0",
        "--output-file": "bench.jsonl",
    }


def test_script_reads_the_key_on_the_host_and_runs_every_step_in_one_process():
    cfg = config(
        bench_concurrencies=[1, 4],
        bench_repeat=2,
        sglang_api_key_file="/k",
        sglang_version="0.5.14",
    )
    script = bench_script(
        cfg,
        bench_settings(cfg, "0.5.14"),
        "/tmp/pyinfra-sglang-bench.abc",
        "/etc/sglang/sglang.yaml",
    )
    assert API_KEY not in script and "--api-key" not in script
    assert (
        "export OPENAI_API_KEY" in script
        and "python3 api_key.py" in script
        and "/etc/sglang/sglang.yaml" in script
    )
    [driver] = [line for line in script.splitlines() if "bench_driver.py" in line]
    assert "--module sglang.bench_serving " in driver
    # A warm-up at the highest concurrency, then each repeat of each concurrency, in order.
    assert "--warmup 4,16 " in driver
    assert re.findall(r"--step (\S+)", driver) == ["1,1,8", "1,4,16", "2,1,8", "2,4,16"]
    # Each call bounded by the driver; the whole (5 calls, the warm-up's too) by timeout.
    bound = run_settings().timeout_s
    assert f"--timeout {bound} " in driver and driver.startswith(f"timeout {5 * bound + 30} ")
    assert "--max-concurrency" not in driver and "--num-prompts" not in driver
    sampler = script.index("gpu_sampler.py --duration")
    assert sampler < script.index(driver)  # sampling starts before the first benchmark
    assert "trap 'kill $sampler" in script  # and stops when the script ends, however it ends
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_script_without_an_api_key_sets_none():
    cfg = config()
    script = bench_script(cfg, bench_settings(cfg, "0.5.23"), "/tmp/x", None)
    assert "OPENAI_API_KEY" not in script and "--module sglang.benchmark.serving " in script


# The venv's python is this interpreter; the folder holds a fake sampler (it sleeps) and a
# fake SGLang whose benchmark module records the key it saw and writes one result per call.
FAKE_SAMPLER = "import time\ntime.sleep(60)\n"
FAKE_BENCHMARK = """
import argparse, json, os, sys

def run_benchmark(args):
    with open("key.seen", "a") as seen:
        seen.write(os.environ.get("OPENAI_API_KEY", "") + "\\n")
    if os.path.exists("fail"):
        print("Traceback: the benchmark broke", file=sys.stderr)
        sys.exit(3)
    row = {"max_concurrency": args.max_concurrency, "completed": args.num_prompts}
    with open(args.output_file, "a") as out:
        out.write(json.dumps(row) + "\\n")

def cli_main():
    parser = argparse.ArgumentParser()
    for flag in ("--backend", "--base-url", "--dataset-name", "--random-input-len",
                 "--random-output-len", "--random-range-ratio", "--output-file"):
        parser.add_argument(flag)
    parser.add_argument("--max-concurrency", type=int)
    parser.add_argument("--num-prompts", type=int, default=1000)
    run_benchmark(parser.parse_args())

if __name__ == "__main__":
    cli_main()
"""


def run_script(tmp_path: Path, key_file: str | None, fail: bool = False):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    folder = tmp_path / "work"
    (folder / "sglang" / "benchmark").mkdir(parents=True)
    for package in ("sglang", "sglang/benchmark"):
        (folder / package / "__init__.py").touch()
    (folder / "sglang" / "benchmark" / "serving.py").write_text(FAKE_BENCHMARK)
    (folder / "gpu_sampler.py").write_text(FAKE_SAMPLER)
    for name in ("api_key.py", "bench_driver.py"):
        (folder / name).write_bytes(program_path(name).read_bytes())
    if fail:
        (folder / "fail").touch()
    cfg = config(venv_path=str(venv), bench_concurrencies=[1, 2], sglang_api_key_file="/k")
    script = bench_script(cfg, bench_settings(cfg, "0.5.23"), str(folder), key_file)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    return result, folder


def sampler_stopped(folder: Path) -> bool:
    """No process of this test's fake sampler is left: before its exec it runs as the fake
    venv python (its path holds the test's folder), after it as "fake-sampler <folder>"."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder.parent).encode() in cmdline.read_bytes():
                return False
        except OSError:
            continue  # the process ended while we looked
    return True


def test_script_runs_every_benchmark_with_the_key_from_the_config_file(tmp_path):
    config_file = tmp_path / "sglang.yaml"
    config_file.write_text(f'host: "127.0.0.1"\napi-key: "{API_KEY}"\n')
    result, folder = run_script(tmp_path, str(config_file))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(x) for x in (folder / "bench.jsonl").read_text().splitlines()]
    assert [(r["max_concurrency"], r["completed"]) for r in rows] == [(1, 8), (2, 8)]
    # The warm-up's result stays out of the run's results.
    assert json.loads((folder / "warmup.jsonl").read_text())["max_concurrency"] == 2
    # Each call's span on the host's clock, for the report's timeline marks and the
    # diagnosis per step; the warm-up is marked as such.
    steps = [json.loads(x) for x in (folder / "steps.jsonl").read_text().splitlines()]
    assert [(s.get("repeat"), s["concurrency"], s.get("warmup")) for s in steps] == [
        (None, 2, True),
        (1, 1, None),
        (1, 2, None),
    ]
    assert all(time.time() - 60 < s["start"] <= s["end"] <= time.time() for s in steps)
    assert all(a["end"] <= b["start"] for a, b in zip(steps, steps[1:]))
    # Every call its own seed: no call repeats an earlier call's prompts (prefix cache).
    assert [s["seed"] for s in steps] == [0, 1, 2]
    # Three calls, one process: the key in the benchmark's environment each time.
    assert (folder / "key.seen").read_text() == f"{API_KEY}\n" * 3
    assert API_KEY not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"benchmark: sglang.benchmark.serving ready in [\d.]+ s", lines[0])
    assert lines[1:] == [
        # The fake server has no /v1/models: the check says it could not run.
        "benchmark: context length not checked: the server's /v1/models names no max_model_len",
        "benchmark: warm-up, 8 prompts",
        "benchmark: repeat 1/1, concurrency 1, 8 prompts",
        "benchmark: repeat 1/1, concurrency 2, 8 prompts",
    ]
    assert sampler_stopped(folder)


def test_script_stops_at_a_failed_benchmark_and_shows_its_log(tmp_path):
    result, folder = run_script(tmp_path, None, fail=True)
    assert result.returncode == 3
    assert "benchmark failed (warm-up), exit 3, its log ends:" in result.stderr
    assert "Traceback: the benchmark broke" in result.stderr
    assert result.stdout.count("benchmark: warm-up") == 1 and "concurrency" not in result.stdout
    assert not (folder / "bench.jsonl").exists()
    assert not (folder / "steps.jsonl").exists()  # a failed call marks no step
    assert sampler_stopped(folder)


def test_script_refuses_without_a_readable_key(tmp_path):
    result, folder = run_script(tmp_path, str(tmp_path / "missing.yaml"))
    assert result.returncode == 90 and "cannot read the API key from" in result.stderr
    assert not (folder / "key.seen").exists()
