"""The stand-in of SGLang's serving benchmark (tests/hosts/standins/sglang) against the stand-in
server, each in its own interpreter on the standard library alone, as a test host runs them;
and the stand-in nvidia-ml-py the GPU sampler imports there. Every wait is bounded."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.hosts import pyindex

SGLANG = next(s for s in pyindex.STAND_INS if s.name == "sglang" and s.version == "0.5.23")
TIMEOUT = 30.0
API_KEY = "sk-standin-bench-KEY-42"
SAMPLER = (
    Path(__file__).resolve().parents[2] / "pyinfra_sglang" / "host_programs" / "gpu_sampler.py"
)


def source_tree(root: Path, spec: pyindex.StandIn) -> Path:
    for relative, data in pyindex.source_files(spec).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(tree: Path, port: int, *args: str, **env: str) -> subprocess.Popen:
    """The stand-in server from ``tree`` on ``port``; ``env``: SGLANG_STANDIN_* settings."""
    return subprocess.Popen(
        [sys.executable, "-S", "-m", "sglang.launch_server", "--port", str(port), *args],
        env={
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(tree),
            "SGLANG_STANDIN_RUN_DIR": str(tree / "run"),
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A stand-in server (0.5.23, API key, 10 ms per token) on a free port: its base URL."""
    tree = source_tree(tmp_path_factory.mktemp("server"), SGLANG)
    port = free_port()
    proc = launch(
        tree,
        port,
        *("--model-path", "org/model", "--api-key", API_KEY),
        SGLANG_STANDIN_WARMUP_S="0.1",
        SGLANG_STANDIN_TOKEN_DELAY_S="0.01",
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (
            "the stand-in server never got ready"
        )
        time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=TIMEOUT)


def client(tmp_path: Path, version: str) -> Path:
    return source_tree(tmp_path / f"client-{version}", dataclasses.replace(SGLANG, version=version))


def bench(tree: Path, module: str, url: str, *args: str, key: str | None = API_KEY):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tree)}
    if key is not None:
        env["OPENAI_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-S", "-m", module, "--base-url", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


ARGS = (
    "--backend",
    "sglang-oai-chat",
    "--dataset-name",
    "random-ids",
    "--random-input-len",
    "64",
    "--random-output-len",
    "12",
    "--random-range-ratio",
    "1.0",
    "--num-prompts",
    "12",
    "--max-concurrency",
    "3",
)


def test_benchmark_sends_every_request_and_writes_sglangs_fields(server, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = bench(
        client(tmp_path, "0.5.23"),
        "sglang.benchmark.serving",
        server,
        *ARGS,
        "--output-file",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    [row] = [json.loads(x) for x in out.read_text().splitlines()]
    assert (row["backend"], row["dataset_name"], row["max_concurrency"]) == (
        "sglang-oai-chat",
        "random-ids",
        3,
    )
    assert row["request_rate"] == float("inf")
    assert (row["completed"], row["total_input_tokens"], row["total_output_tokens"]) == (
        12,
        12 * 64,
        12 * 12,
    )
    for name in (
        "duration",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "concurrency",
        *(
            f"{s}_{m}_ms"
            for s in ("mean", "median", "p99")
            for m in ("ttft", "tpot", "itl", "e2e_latency")
        ),
    ):
        assert isinstance(row[name], float) and row[name] > 0, name
    assert row["output_throughput"] == pytest.approx(row["total_output_tokens"] / row["duration"])
    assert row["total_throughput"] == pytest.approx(
        row["input_throughput"] + row["output_throughput"]
    )
    # The server spends 10 ms per token; at most 3 requests were in flight at once.
    assert 9 <= row["median_itl_ms"] < 200 and row["median_tpot_ms"] >= 9
    assert 1.5 < row["concurrency"] <= 3.05
    assert (
        "Serving Benchmark Result" in result.stdout and API_KEY not in result.stdout + result.stderr
    )
    # --output-file appends, as SGLang's does.
    assert (
        bench(
            client(tmp_path, "0.5.23"),
            "sglang.benchmark.serving",
            server,
            *ARGS,
            "--output-file",
            str(out),
        ).returncode
        == 0
    )
    assert len(out.read_text().splitlines()) == 2


DRIVER = SAMPLER.parent / "bench_driver.py"


def drive(tree: Path, folder: Path, module: str, url: str, *steps: str):
    """host_programs/bench_driver.py in ``folder`` with the stand-in on the path."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tree), "OPENAI_API_KEY": API_KEY}
    base = ARGS[: ARGS.index("--num-prompts")]  # the driver sets prompts and concurrency
    return subprocess.run(
        [sys.executable, "-S", str(DRIVER), "--module", module, "--log", "bench.log"]
        + ["--steps", "steps.jsonl", "--timeout", "60", *steps, "--", "--base-url", url]
        + [*base, "--output-file", "bench.jsonl"],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_the_driver_runs_every_step_in_one_process(server, tmp_path):
    result = drive(
        client(tmp_path, "0.5.17"),
        tmp_path,
        "sglang.bench_serving",
        server,
        *("--warmup", "3,3", "--step", "1,1,8", "--step", "1,3,12", "--step", "2,1,8"),
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(x) for x in (tmp_path / "bench.jsonl").read_text().splitlines()]
    assert [(r["max_concurrency"], r["completed"]) for r in rows] == [(1, 8), (3, 12), (1, 8)]
    assert json.loads((tmp_path / "warmup.jsonl").read_text())["completed"] == 3
    steps = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [s.get("label") or f"{s['repeat']}:{s['concurrency']}" for s in steps] == [
        "warm-up",
        "1:1",
        "1:3",
        "2:1",
    ]
    # One import, one parse: the deprecation warning of the old path shows once per import
    # (the module run as __main__ to parse, then imported), not once per step.
    log = (tmp_path / "bench.log").read_text()
    assert log.count("Serving Benchmark Result") == 4
    assert log.count("`sglang.bench_serving` is deprecated") == 2
    assert API_KEY not in result.stdout + result.stderr + log


def test_the_driver_names_a_missing_module_and_a_bad_step(server, tmp_path):
    missing = drive(
        client(tmp_path, "0.5.14"), tmp_path, "sglang.benchmark.serving", server, "--step", "1,1,8"
    )
    assert missing.returncode == 1
    assert "benchmark failed (starting sglang.benchmark.serving), exit 1" in missing.stderr
    assert "No module named" in missing.stderr and not (tmp_path / "bench.jsonl").exists()
    bad = drive(
        client(tmp_path, "0.5.17"), tmp_path, "sglang.benchmark.serving", server, "--step", "1,0,8"
    )
    assert bad.returncode == 2 and "'1,0,8': expected 3 whole numbers above 0" in bad.stderr


def test_benchmark_module_moved_in_0_5_15(server, tmp_path):
    out = str(tmp_path / "b.jsonl")
    new, old = client(tmp_path, "0.5.17"), client(tmp_path, "0.5.14")
    moved = bench(new, "sglang.bench_serving", server, *ARGS, "--output-file", out)
    # Real 0.5.17's FutureWarning (tests/fixtures/sglang-0.5.17-h200).
    assert moved.returncode == 0 and "`sglang.bench_serving` is deprecated" in moved.stderr
    before = bench(old, "sglang.bench_serving", server, *ARGS, "--output-file", out)
    assert before.returncode == 0 and "deprecated" not in before.stderr
    missing = bench(old, "sglang.benchmark.serving", server, *ARGS, "--output-file", out)
    assert missing.returncode == 1 and "No module named sglang.benchmark.serving" in missing.stderr
    assert len(Path(out).read_text().splitlines()) == 2


def test_benchmark_without_the_key_or_with_unknown_flags_fails(server, tmp_path):
    tree, out = client(tmp_path, "0.5.23"), tmp_path / "b.jsonl"
    refused = bench(
        tree, "sglang.benchmark.serving", server, *ARGS, "--output-file", str(out), key=None
    )
    assert refused.returncode == 1 and "401" in refused.stdout
    wrong_flag = bench(
        tree, "sglang.benchmark.serving", server, *ARGS, "--random-input", "5", "--bogus"
    )
    assert wrong_flag.returncode == 2 and "unrecognized arguments: --bogus" in wrong_flag.stderr
    unsupported = bench(
        tree, "sglang.benchmark.serving", server, "--backend", "sglang", "--num-prompts", "1"
    )
    assert unsupported.returncode == 2 and "only --backend" in unsupported.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def nvml_site(tmp_path_factory) -> Path:
    """The stand-in nvidia-ml-py wheel, installed (unpacked) into a folder."""
    root = tmp_path_factory.mktemp("nvml")
    wheel = pyindex.build_wheel(pyindex.NVIDIA_ML_PY, root)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root / "site")
    return root / "site"


def test_nvidia_ml_py_stand_in_is_the_double_with_its_capture(nvml_site):
    doubles = Path(__file__).resolve().parents[1] / "doubles"
    assert (nvml_site / "pynvml" / "_double.py").read_bytes() == (
        doubles / "pynvml.py"
    ).read_bytes()
    assert sorted(p.name for p in (nvml_site / "pynvml" / "capture").iterdir()) == [
        "nvml.json",
        "samples.json",
        "smi_q.txt",
    ]
    dist_info = nvml_site / "nvidia_ml_py-13.615.71.dist-info"
    assert "Name: nvidia-ml-py\n" in (dist_info / "METADATA").read_text()


def test_gpu_sampler_runs_on_the_stand_in_nvidia_ml_py(nvml_site, tmp_path):
    # -S: only the standard library and the installed stand-in, as in a host's venv.
    out = tmp_path / "samples.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            str(SAMPLER),
            "--duration",
            "0.6",
            "--interval",
            "0.2",
            "--output",
            str(out),
        ],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(nvml_site)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    samples = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(samples) == 3
    # The capture's first rows, GPU 0: idle at 345 MHz, 77.184 W.
    first = samples[0]["gpus"][0]
    assert (first["name"], first["sm_clock_mhz"], first["power_w"], first["pcie_gen_max"]) == (
        "NVIDIA H200",
        345,
        77.184,
        5,
    )
    assert [g["index"] for g in samples[0]["gpus"]] == [0, 1]


# --- the stand-in against real SGLang 0.5.17's answers (tests/fixtures/sglang-0.5.17-h200) ---

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"


def sse_events(raw: bytes) -> list:
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith(b"data: {")]


def shape(chunk: dict) -> tuple:
    choices = chunk["choices"]
    return (
        tuple(sorted(chunk)),
        tuple(sorted(choices[0])) if choices else (),
        tuple(sorted(choices[0]["delta"])) if choices else (),
        tuple(sorted(chunk.get("usage") or ())),
    )


def get(url: str, path: str, key: str | None = API_KEY, body: dict | None = None):
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode() if body else None,
        method="POST" if body else "GET",
    )
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_stand_in_answers_in_the_real_servers_shapes(server):
    real_card = json.loads((REAL / "tiny" / "v1-models.txt").read_text())["data"][0]
    status, body = get(server, "/v1/models")
    assert status == 200 and sorted(json.loads(body)["data"][0]) == sorted(real_card)
    # Refused without the key, in the real server's words.
    real_refusal = (REAL / "tiny" / "v1-models-no-key.txt").read_text()
    assert get(server, "/v1/models", key=None) == (401, real_refusal.encode())
    # Chat, streamed with usage: the same chunk shapes in the same order of kinds.
    real = sse_events((REAL / "tiny" / "sse-chat-usage.txt").read_bytes())
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    stream = {**ask, "stream": True, "stream_options": {"include_usage": True}}
    status, body = get(server, "/v1/chat/completions", body=stream)
    mine = sse_events(body)
    assert status == 200
    assert shape(mine[0]) == shape(real[0])  # the role chunk, before any token
    assert mine[0]["choices"][0]["delta"] == real[0]["choices"][0]["delta"]
    assert {shape(c) for c in mine[1:-2]} == {shape(c) for c in real[1:-2]}  # tokens
    assert shape(mine[-2]) == shape(real[-2])  # the finish chunk
    assert shape(mine[-1]) == shape(real[-1])  # usage
    real_plain = json.loads((REAL / "tiny" / "chat-nonstream.json").read_text())
    status, body = get(server, "/v1/chat/completions", body=ask)
    answer = json.loads(body)
    assert sorted(answer) == sorted(real_plain)
    assert sorted(answer["usage"]) == sorted(real_plain["usage"])
    # /server_info holds the API key in clear, as the real one does (masked in the capture).
    real_info = json.loads((REAL / "tiny" / "get_server_info.txt").read_text())
    assert real_info["api_key"] == "********"
    assert json.loads(get(server, "/server_info")[1])["api_key"] == API_KEY


def test_the_stand_ins_benchmark_lines_carry_what_the_real_ones_do(server, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = bench(
        client(tmp_path, "0.5.17"),
        "sglang.benchmark.serving",
        server,
        *ARGS,
        "--output-file",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    [mine] = read_lines(out)
    real = read_lines(REAL / "graphs-on" / "bench.jsonl")[0]
    read = {
        "completed",
        "output_throughput",
        "max_concurrency",
        "median_tpot_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "p99_tpot_ms",
        "duration",
        "server_info",
    }
    assert read <= real.keys() and read <= mine.keys()
    # The real line's server_info holds the api_key; so does the stand-in's.
    assert "api_key" in real["server_info"] and mine["server_info"]["api_key"] == API_KEY


def read_lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_stand_in_listens_only_after_loading_then_answers_503_then_200(tmp_path):
    # Real 0.5.17: connection refused for 146 s, 503 for 12 s, then 200 (health-warmup.json).
    real = json.loads((REAL / "tiny" / "health-warmup.json").read_text())
    phases = [r["/health"][0] for r in real]
    real_order = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert real_order == [0, 503, 200]
    tree, port = source_tree(tmp_path / "server", SGLANG), free_port()
    proc = launch(
        tree,
        port,
        *("--model-path", "org/m"),
        SGLANG_STANDIN_WARMUP_S="1.5",
        SGLANG_STANDIN_LOAD_S="0.7",
    )
    seen = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and (not seen or seen[-1] != 200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as a:
                    status = a.status
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError:
                status = 0
            if not seen or seen[-1] != status:
                seen.append(status)
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)
    assert seen == real_order
