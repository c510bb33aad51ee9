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
from pyinfra_sglang.service_files import server_url

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
        ("0.5.17", "sglang.bench_serving"),
        ("0.5.18", "sglang.benchmark.serving"),
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
    assert (fixed["backend"], fixed["dataset"], fixed["range_ratio"]) == (
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
    args = bench_args(settings, "http://127.0.0.1:30000", 4, "bench.jsonl")
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
        "--num-prompts": "16",
        "--max-concurrency": "4",
        "--output-file": "bench.jsonl",
    }


def test_script_reads_the_key_on_the_host_and_bounds_every_step():
    cfg = config(
        bench_concurrencies=[1, 4],
        bench_repeat=2,
        sglang_api_key_file="/k",
        sglang_version="0.5.17",
    )
    script = bench_script(
        cfg,
        bench_settings(cfg, "0.5.17"),
        "/tmp/pyinfra-sglang-bench.abc",
        "/etc/sglang/sglang.yaml",
    )
    assert API_KEY not in script and "--api-key" not in script
    assert (
        "export OPENAI_API_KEY" in script
        and "python3 api_key.py" in script
        and "/etc/sglang/sglang.yaml" in script
    )
    calls = [line for line in script.splitlines() if " -m sglang." in line]
    assert len(calls) == 4 and all("-m sglang.bench_serving " in c for c in calls)
    assert [c.split("--max-concurrency ")[1].split()[0] for c in calls] == ["1", "4", "1", "4"]
    assert all(c.startswith(f"timeout {run_settings()['timeout_s']} ") for c in calls)
    sampler = script.index("gpu_sampler.py --duration")
    assert sampler < script.index(calls[0])  # sampling starts before the first benchmark
    assert "trap 'kill $sampler" in script  # and stops when the script ends, however it ends
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_script_without_an_api_key_sets_none():
    cfg = config()
    script = bench_script(cfg, bench_settings(cfg, "0.5.23"), "/tmp/x", None)
    assert "OPENAI_API_KEY" not in script and "-m sglang.benchmark.serving" in script


FAKE_PYTHON = """#!/bin/bash
# The venv's python, faked: `-m MODULE ...` is the benchmark, anything else the sampler.
if [ "$1" = "-m" ]; then
    echo "$OPENAI_API_KEY" > key.seen
    out="${@: -1}"
    if [ -e fail ]; then echo "Traceback: the benchmark broke" >&2; exit 3; fi
    echo '{"max_concurrency": 1}' >> "$out"
    exit 0
fi
exec -a "fake-sampler $PWD" sleep 60
"""


def run_script(tmp_path: Path, key_file: str | None, fail: bool = False):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "api_key.py").write_bytes(program_path("api_key.py").read_bytes())
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
    assert len((folder / "bench.jsonl").read_text().splitlines()) == 2
    # Each call's span on the host's clock, for the report's timeline marks.
    steps = [json.loads(x) for x in (folder / "steps.jsonl").read_text().splitlines()]
    assert [(s["repeat"], s["concurrency"]) for s in steps] == [(1, 1), (1, 2)]
    assert all(time.time() - 60 < s["start"] <= s["end"] <= time.time() for s in steps)
    assert steps[0]["end"] <= steps[1]["start"]
    assert (folder / "key.seen").read_text() == f"{API_KEY}\n"  # in the benchmark's environment
    assert API_KEY not in result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "benchmark: repeat 1/1, concurrency 1, 8 prompts",
        "benchmark: repeat 1/1, concurrency 2, 8 prompts",
    ]
    assert sampler_stopped(folder)


def test_script_stops_at_a_failed_benchmark_and_shows_its_log(tmp_path):
    result, folder = run_script(tmp_path, None, fail=True)
    assert result.returncode == 3
    assert "benchmark failed (repeat 1/1, concurrency 1), exit 3, its log ends:" in result.stderr
    assert "Traceback: the benchmark broke" in result.stderr
    assert result.stdout.count("benchmark:") == 1 and not (folder / "bench.jsonl").exists()
    assert not (folder / "steps.jsonl").exists()  # a failed call marks no step
    assert sampler_stopped(folder)


def test_script_refuses_without_a_readable_key(tmp_path):
    result, folder = run_script(tmp_path, str(tmp_path / "missing.yaml"))
    assert result.returncode == 90 and "cannot read the API key from" in result.stderr
    assert not (folder / "key.seen").exists()
