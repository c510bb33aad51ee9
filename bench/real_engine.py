"""The project's own pieces against a real SGLang server on the H200 machine.

Two halves. ``prepare`` runs here, in the checkout: it renders each scenario's unit with the
project's own code (``pyinfra-sglang render``), writes the bench scripts ``bench_script()``
generates and the ``profile.json`` the diagnosis reads, and copies the host programs, all into
``.sglkit/run/`` (ignored, carried to the GPU machine). ``device`` runs there, with the device
kit's Python (standard library only: the project's dependencies are not on that machine): it
starts SGLang exactly as the rendered unit says (its ExecStart, its EnvironmentFile, its
``--config`` file with a test API key in place of the masked one; root instead of the unit's
user, the kit's site folder on PYTHONPATH as the venv), then runs a scenario and saves what it
saw under ``$OUT``:

``tiny``
    the successor tiny model (greedy output predictable): ``/health`` and ``/health_generate``
    through the warm-up, ``/v1/models``, ``/get_server_info`` (the key masked), ``/metrics``
    without the key, requests without and with a wrong key, raw SSE chat streams with and
    without usage, the decode check (the successor's word passes, "Paris" fails, an empty word
    is refused), a streamed request in flight through SIGTERM to the main process (systemd's
    ``KillMode=mixed``), the drain time, and the server's start and shutdown lines.
``graphs-on`` / ``graphs-off``
    the Llama-3-8B shape (dummy weights) with CUDA graphs on or off: the benchmark as
    ``bench_script()`` writes it (one driver process, a warm-up, every repeat), with the GPU
    sampler and the /metrics poller; ``graphs-on`` also runs it the way it ran before (one
    ``python -m`` benchmark process per step) for the wall time and GPU-busy share before and
    after.

``summary`` runs here on what came back: per run folder the wall time, the GPU-busy share of
the steps, the diagnosis per step, and the A/B of graphs on against off.

    python bench/real_engine.py prepare                       (here; then three device calls)
    bash .sglkit/bin/setup.sh && python3 bench/real_engine.py device tiny      (GPU machine)
    python bench/real_engine.py summary /work/.device/...     (here, on the returned files)

docs/testing.md ("The real engine on the H200") says what each device call carries.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

# The sibling module, whether this runs as a script (here, on the GPU machine) or is imported
# as bench.real_engine.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_engine_monitoring as monitoring

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / ".sglkit" / "run"
PROFILES = ROOT / "bench" / "real_engine_profiles"
VENV = "/opt/torch/.venv"  # the GPU machine's Python, which holds torch (the kit adds SGLang)
SGLANG_VERSION = "0.5.17"
PORT = 30000
URL = f"http://127.0.0.1:{PORT}"
# The test key written into the rendered config file in place of the masked one.
API_KEY = "sk-realengine-0123456789abcdef"
MASK = "********"
BENCH_HOME = "/tmp/realbench"
PROGRAMS = ("gpu_sampler.py", "api_key.py", "bench_driver.py", "decode_client.py", "watchdog.py")
# Each scenario: the profile rendered, and the benchmark's settings (inventory fields).
SCENARIOS = {
    "tiny": {"profile": "real-tiny", "bench": None},
    "graphs-on": {
        "profile": "real-8b",
        "overrides": {},
        "bench": {"concurrencies": [1, 64], "input_len": 512, "output_len": 128, "repeat": 3},
        "before": True,
    },
    "graphs-off": {
        "profile": "real-8b",
        "overrides": {"cuda_graph": False},
        "bench": {"concurrencies": [1, 64], "input_len": 512, "output_len": 128, "repeat": 3},
        "before": False,
    },
    # The server's own limits (issue: a capped server and a full KV cache were read as GPU
    # limits): two running requests at most, then a KV cache of ~100k tokens under 4096-token
    # prompts; and long fresh prompts, whose TTFT must sit near the prefill roofline.
    "capped": {
        "profile": "real-8b",
        "overrides": {"max_running_requests": 2},
        "bench": {"concurrencies": [1, 8, 32], "input_len": 512, "output_len": 128, "repeat": 1},
        "before": False,
        # Scraped by real Prometheus with the project's config and alert rules (--prometheus).
        "monitor": True,
    },
    "kv-starved": {
        "profile": "real-8b",
        "overrides": {"mem_fraction_static": 0.2},
        "bench": {"concurrencies": [8, 64], "input_len": 4096, "output_len": 256, "repeat": 1},
        "before": False,
    },
    "long-prompt": {
        "profile": "real-8b",
        "overrides": {},
        "bench": {"concurrencies": [1, 8], "input_len": 6000, "output_len": 64, "repeat": 2},
        "before": False,
    },
    # The watchdog's judgement (its host program's own functions) on the real engine: during
    # the load, under a long-prefill load that saturates it, and with its scheduler stopped.
    "watchdog": {"profile": "real-8b", "overrides": {}, "bench": None},
}
# Passed through from the machine: NVLink multicast stays off (the device tool's rule).
PASSED_THROUGH = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


# --- prepare (here, with the project) --------------------------------------------------------


def h200_placement(profile):
    """The profile placed on the device machine's one H200 with the kit's SGLang."""
    from pyinfra_sglang.gpus import gpu_by_name
    from pyinfra_sglang.serving.placement import GpuSet, place

    spec = gpu_by_name("NVIDIA H200")
    return place(profile, GpuSet(1, spec.memory_gb, spec.arch), sglang_version=SGLANG_VERSION)


def prepare(args: argparse.Namespace) -> int:
    from pyinfra_sglang.host_programs import program_path
    from pyinfra_sglang.inventory import HostConfig
    from pyinfra_sglang.served_benchmark.results import profile_document
    from pyinfra_sglang.served_benchmark.settings import bench_script, bench_settings
    from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

    if RUN.exists():
        shutil.rmtree(RUN)
    RUN.mkdir(parents=True)
    for name in PROGRAMS:
        shutil.copy(program_path(name), RUN / name)
    for scenario, spec in SCENARIOS.items():
        overrides = spec.get("overrides") or {}
        profile = merge_overrides(load_profile(spec["profile"], [str(PROFILES)]), overrides)
        # The render with the inventory's overrides is what a host gets: a profile folder of
        # the merged profile keeps the CLI's own path.
        profile_dir = RUN / f"{scenario}-profiles"
        rendered = render_with_overrides(spec["profile"], overrides, profile_dir)
        if rendered is None:
            print(f"render failed for {scenario}", file=sys.stderr)
            return 1
        (RUN / f"{scenario}.render").write_text(rendered)
        plan = {
            "scenario": scenario,
            "model": profile.model,
            "bench": None,
            "start_timeout_s": profile.start_timeout_s,
        }
        if spec["bench"]:
            b = spec["bench"]
            config = HostConfig(
                sglang_model_profile=spec["profile"],
                sglang_profile_dirs=[str(profile_dir)],
                sglang_profile_overrides=overrides,
                sglang_version=SGLANG_VERSION,
                venv_path=VENV,
                sglang_api_key_file="/x/sglang-api-key",
                bench_concurrencies=b["concurrencies"],
                bench_input_len=b["input_len"],
                bench_output_len=b["output_len"],
                bench_repeat=b["repeat"],
            )
            settings = bench_settings(config, SGLANG_VERSION)
            runs = {"after": f"{BENCH_HOME}/{scenario}-after"}
            if spec.get("before"):
                runs["before"] = f"{BENCH_HOME}/{scenario}-before"
            for variant, folder in runs.items():
                script = bench_script(config, settings, folder, "/etc/sglang/sglang.yaml")
                if variant == "before":  # one repeat is enough to see the start-up's share
                    once = config.model_copy(update={"bench_repeat": 1})
                    script = _one_process_per_step(
                        script, bench_settings(once, SGLANG_VERSION), once
                    )
                (RUN / f"{scenario}-{variant}.sh").write_text(script)
            document = profile_document(h200_placement(profile), [{"name": "NVIDIA H200"}])
            (RUN / f"{scenario}-profile.json").write_text(json.dumps(document, indent=2))
            settings_doc = {"settings": settings.as_dict(), "hash": settings.digest()}
            (RUN / f"{scenario}-settings.json").write_text(json.dumps(settings_doc, indent=2))
            plan["bench"] = runs
            if spec.get("monitor"):
                monitoring.prepare(RUN, scenario, config, args.dashboard)
                plan["monitoring"] = f"{scenario}-monitoring"
        (RUN / f"{scenario}.json").write_text(json.dumps(plan, indent=2))
    size = sum(p.stat().st_size for p in RUN.rglob("*") if p.is_file())
    print(f"prepared {len(SCENARIOS)} scenarios in {RUN} ({size / 1e3:.0f} kB)")
    return 0


def render_with_overrides(profile_name: str, overrides: dict, profile_dir: Path) -> str | None:
    """``pyinfra-sglang render`` of a profile of bench/real_engine_profiles with ``overrides``
    (written into a copy of the profile in ``profile_dir``, so the CLI's own path renders it)
    for one H200 and this SGLang; its output, None when the render refuses."""
    import contextlib
    import io

    from pyinfra_sglang.cli.main import main as cli
    from pyinfra_sglang.gpus import gpu_by_name

    profile_dir.mkdir(parents=True, exist_ok=True)
    source = (PROFILES / f"{profile_name}.toml").read_text()
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in overrides.items())
    (profile_dir / f"{profile_name}.toml").write_text(_with_overrides(source, extra))
    rendered = io.StringIO()
    argv = ["render", "--profile", profile_name, "--profile-dir", str(profile_dir)]
    argv += ["--gpus", "1", "--arch", "sm_90", "--sglang-version", SGLANG_VERSION]
    argv += ["--venv", VENV, "--gpu-mem-gb", str(int(gpu_by_name("NVIDIA H200").memory_gb))]
    with contextlib.redirect_stdout(rendered):
        if cli(argv) != 0:
            return None
    return rendered.getvalue()


def _with_overrides(source: str, extra: str) -> str:
    """The profile's TOML with top-level keys set (before its first table)."""
    if not extra:
        return source
    keys = {line.split("=")[0].strip() for line in extra.splitlines()}
    kept = [line for line in source.splitlines() if line.split("=")[0].strip() not in keys]
    first_table = next((i for i, line in enumerate(kept) if line.startswith("[")), len(kept))
    return "\n".join(kept[:first_table]) + "\n" + extra + "\n".join(kept[first_table:]) + "\n"


def _one_process_per_step(script: str, settings, config) -> str:
    """The benchmark as it ran before the bench driver: one ``python -m`` process per step
    (start-up, tokenizer and prompts each time), each step's span timed around it."""
    from pyinfra_sglang.served_benchmark.bench_serving import bench_module
    from pyinfra_sglang.served_benchmark.settings import bench_args
    from pyinfra_sglang.serving.service_files import server_url

    lines = script.splitlines()
    [driver] = [i for i, line in enumerate(lines) if "bench_driver.py" in line]
    python = shlex.quote(f"{config.venv_path}/bin/python")
    module = bench_module(settings.sglang_version)
    base = " ".join(shlex.quote(a) for a in bench_args(settings, server_url(config), "bench.jsonl"))
    calls = []
    for repeat in range(1, settings.repeat + 1):
        for c in settings.concurrencies:
            step = f'{{"repeat": {repeat}, "concurrency": {c}, "start": %s, "end": %s}}\\n'
            calls += [
                "start=$(date +%s.%N)",
                f"{python} -m {module} {base} --num-prompts {settings.num_prompts(c)} "
                f"--max-concurrency {c} >>bench.log 2>&1 || exit $?",
                f'printf {shlex.quote(step)} "$start" "$(date +%s.%N)" >>steps.jsonl',
            ]
    return "\n".join(lines[:driver] + calls + lines[driver + 1 :]) + "\n"


# --- device (the GPU machine, standard library only) -----------------------------------------


def parse_render(text: str) -> dict[str, tuple[int, str]]:
    """``pyinfra-sglang render`` output: ``{path: (mode, content)}``."""
    files, path, mode, body = {}, None, 0, []
    for line in text.splitlines():
        header = re.fullmatch(r"# ==> (\S+) \(mode (\d+)\) <==", line)
        if header:
            if path:
                files[path] = (mode, "\n".join(body).strip("\n") + "\n")
            path, mode, body = header.group(1), int(header.group(2), 8), []
        elif path:
            body.append(line)
    if path:
        files[path] = (mode, "\n".join(body).strip("\n") + "\n")
    return files


def unit_value(unit: str, key: str) -> str | None:
    """A [Service] key's value, continuation lines joined."""
    lines = unit.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{key}="):
            value, j = line[len(key) + 1 :], i
            while value.endswith("\\"):
                j += 1
                value = value[:-1] + " " + lines[j].strip()
            return value
    return None


def environment_file(text: str) -> dict[str, str]:
    """systemd EnvironmentFile lines (KEY=VALUE, comments, quoted values)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


class Server:
    """SGLang started as the rendered unit says; stopped as systemd's KillMode=mixed does."""

    def __init__(self, render: str, out: Path, name: str):
        self.files = parse_render(render)
        self.out, self.name = out, name
        self.unit = next(v[1] for k, v in self.files.items() if k.endswith(".service"))
        self.log_path = out / f"{name}-server.log"
        self.proc = None

    def start(self) -> list[str]:
        env = dict(self.base_environment())
        for path, (mode, content) in self.files.items():
            if path.endswith(".service"):
                continue
            content = content.replace(f'api-key: "{MASK}"', f'api-key: "{API_KEY}"')
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(content)
            os.chmod(path, mode)
        env_file = unit_value(self.unit, "EnvironmentFile").lstrip("-")
        # A masked secret (the render shows HF_TOKEN so) is no value: served offline here.
        unit_env = {
            k: v for k, v in environment_file(Path(env_file).read_text()).items() if v != MASK
        }
        env.update(unit_env)
        for key, value in unit_env.items():
            if key.endswith(("_PATH", "_DIR", "_HOME", "_BASE")) and value.startswith("/var/lib"):
                Path(value).mkdir(parents=True, exist_ok=True)
        # The venv on a host holds SGLang; here the kit's site folder does.
        env["PYTHONPATH"] = server_site()
        if "CUDA_HOME" in env:  # the toolkit's compilers, where a host has them on its PATH
            env["PATH"] = f"{env.get('PATH', '')}:{env['CUDA_HOME']}/bin"
        command = shlex.split(unit_value(self.unit, "ExecStart"))
        with open(self.log_path, "a") as log:
            log.write(f"== {shlex.join(command)}\n")
            log.flush()
            self.started = time.time()
            self.proc = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return command

    @staticmethod
    def base_environment() -> dict[str, str]:
        # What systemd gives a service, the kit's offline and JIT variables (which a venv on a
        # host does not need: its caches are the unit's), and the machine's multicast switches.
        env = {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "CUDA_HOME"):
            if key in os.environ:
                env[key] = os.environ[key]
        env["SGLANG_USE_SGL_FA3_KERNEL"] = "1"
        env.update({k: os.environ[k] for k in PASSED_THROUGH if k in os.environ})
        return env

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 120) -> float:
        """SIGTERM to the main process alone, then (after it exits or the timeout) SIGKILL to
        what is left of the group: KillMode=mixed, TimeoutStopSec. Seconds the main took."""
        start = time.time()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        took = time.time() - start
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        time.sleep(2)
        return took


def http(method: str, path: str, body: dict | None = None, key: str | None = None, timeout=30):
    """(status, headers, body bytes); status 0 and the error text when unreachable."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(URL + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()
    except (OSError, ValueError) as error:
        return 0, {}, str(error).encode()


def poll_warmup(server: Server, deadline_s: float, record: list) -> bool:
    """/health and /health_generate every 0.5 s from the start until ready (both 200)."""
    end = time.time() + deadline_s
    while time.time() < end and server.alive():
        row = {"t": round(time.time() - server.started, 2)}
        for path in ("/health", "/health_generate"):
            status, _, body = http("GET", path, timeout=5)
            row[path] = [status, body[:200].decode(errors="replace")]
        record.append(row)
        if row["/health"][0] == 200 and row["/health_generate"][0] == 200:
            return True
        time.sleep(0.5)
    return False


def wait_ready(server: Server, deadline_s: float) -> bool:
    end = time.time() + deadline_s
    while time.time() < end and server.alive():
        if http("GET", "/health", timeout=5)[0] == 200:
            return True
        time.sleep(1)
    return False


def sse(body: dict, key: str, out: Path, stop_after: float | None = None) -> dict:
    """A raw streamed chat request: its bytes saved to ``out``; whether it ended in [DONE]."""
    request = urllib.request.Request(
        URL + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {key}")
    seen = {"chunks": 0, "done": False, "error": None, "first_s": None}
    start = time.time()
    try:
        with urllib.request.urlopen(request, timeout=300) as answer, open(out, "wb") as raw:
            for line in answer:
                raw.write(line)
                if line.startswith(b"data: "):
                    seen["chunks"] += 1
                    seen["first_s"] = seen["first_s"] or round(time.time() - start, 3)
                    if line.strip() == b"data: [DONE]":
                        seen["done"] = True
    except (OSError, ValueError) as error:
        seen["error"] = str(error)
    seen["seconds"] = round(time.time() - start, 3)
    return seen


def successor_word(model: str, site: str) -> str:
    """The word the successor tiny model answers the decode check's prompt with: its greedy
    output after a prompt ending in token k is k+1, k+2, ... (the kit's make_model.py)."""
    code = (
        "import re, sys\n"
        "from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "m = [{'role': 'user', 'content': 'What is the capital of France? Answer in one word.'}]\n"
        "text = t.apply_chat_template(m, add_generation_prompt=True, tokenize=False)\n"
        "ids = t.encode(text, add_special_tokens=False)\n"
        "words = re.findall(r'[A-Za-z]{6,}', t.decode(list(range(ids[-1] + 1, ids[-1] + 257))))\n"
        "print(words[0] if words else '')\n"
    )
    env = {**os.environ, "PYTHONPATH": site}
    done = subprocess.run(
        [sys.executable, "-c", code, model], capture_output=True, text=True, env=env, timeout=120
    )
    return done.stdout.strip()


def decode_check(expect: str, key: str) -> dict:
    env = {**os.environ, "SGLANG_API_KEY": key}
    done = subprocess.run(
        [sys.executable, str(RUN / "decode_client.py"), "--url", URL, "--expect", expect]
        + ["--timeout", "60", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"stdout": done.stdout[-500:]}
    return {"expect": expect, "rc": done.returncode, "stderr": done.stderr[-300:], **result}


def scenario_tiny(server: Server, out: Path, held: list) -> None:
    warmup = []
    ready = poll_warmup(server, 600, warmup)
    (out / "health-warmup.json").write_text(json.dumps(warmup, indent=1))
    ready_s = warmup[-1]["t"] if warmup else None
    held.append(("server ready (/health and /health_generate 200)", ready, f"{ready_s} s"))
    if not ready:
        return
    codes = sorted({(r["/health"][0], r["/health_generate"][0]) for r in warmup})
    held.append(("health answered during warm-up", len(warmup) > 1, f"status pairs {codes}"))
    captures = {}
    for name, path, key in (
        ("v1-models", "/v1/models", API_KEY),
        ("health", "/health", None),
        ("health_generate", "/health_generate", None),
        ("get_server_info", "/get_server_info", API_KEY),
        ("metrics-no-key", "/metrics", None),
        ("v1-models-no-key", "/v1/models", None),
    ):
        status, headers, body = http("GET", path, key=key)
        text = body.decode(errors="replace").replace(API_KEY, MASK)
        captures[name] = {"status": status, "content_type": headers.get("content-type")}
        (out / f"{name}.txt").write_text(text)
    held.append(
        (
            "/metrics open without the key",
            captures["metrics-no-key"]["status"] == 200,
            f"{captures['metrics-no-key']['status']}",
        )
    )
    held.append(
        (
            "/v1/models refused without the key",
            captures["v1-models-no-key"]["status"] == 401,
            f"{captures['v1-models-no-key']['status']}",
        )
    )
    chat = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    for name, key in (("chat-no-key", None), ("chat-wrong-key", "wrong-key")):
        status, headers, body = http("POST", "/v1/chat/completions", chat, key=key)
        captures[name] = {"status": status, "body": body.decode(errors="replace")[:300]}
        held.append((f"{name} refused", status == 401, str(status)))
    status, _, body = http("POST", "/v1/chat/completions", {**chat, "temperature": 0}, API_KEY)
    (out / "chat-nonstream.json").write_text(body.decode(errors="replace"))
    prompt = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    stream = {"model": "x", "messages": prompt, "max_tokens": 24, "temperature": 0, "stream": True}
    captures["sse-usage"] = sse(
        {**stream, "stream_options": {"include_usage": True}}, API_KEY, out / "sse-chat-usage.txt"
    )
    captures["sse-plain"] = sse(stream, API_KEY, out / "sse-chat.txt")
    (out / "http-captures.json").write_text(json.dumps(captures, indent=1))
    word = successor_word(json.loads((RUN / "tiny.json").read_text())["model"], server_site())
    checks = [decode_check(word, API_KEY), decode_check("Paris", API_KEY)]
    checks.append(decode_check("", API_KEY))
    checks.append(decode_check(word, "wrong-key"))
    (out / "decode-checks.json").write_text(json.dumps(checks, indent=1))
    held.append(
        (
            f"decode-check --expect {word!r} passes",
            checks[0]["rc"] == 0,
            f"rc {checks[0]['rc']}, {checks[0].get('reason')}, ttft {checks[0].get('ttft_s')}",
        )
    )
    held.append(
        (
            "decode-check --expect Paris fails on noise",
            checks[1]["rc"] == 1,
            f"rc {checks[1]['rc']}, {checks[1].get('reason')}",
        )
    )
    held.append(("decode-check --expect '' refused", checks[2]["rc"] == 2, f"rc {checks[2]['rc']}"))
    held.append(
        (
            "decode-check with a wrong key fails",
            checks[3]["rc"] == 1,
            f"rc {checks[3]['rc']}, {checks[3].get('reason')}",
        )
    )
    # The drain: a long stream in flight when the main process gets SIGTERM.
    long = {**stream, "max_tokens": 1500, "ignore_eos": True}
    result = {}
    reader = threading.Thread(
        target=lambda: result.update(sse(long, API_KEY, out / "sse-drain.txt"))
    )
    reader.start()
    time.sleep(1.0)
    took = server.stop()
    reader.join(180)
    (out / "drain.json").write_text(json.dumps({"stream": result, "stop_s": took}, indent=1))
    held.append(
        (
            "a stream in flight through SIGTERM ends with [DONE]",
            result.get("done"),
            f"{result.get('chunks')} chunks in {result.get('seconds')} s; main exited "
            f"{took:.1f} s after SIGTERM",
        )
    )


# The watchdog scenario: a check's own timeout, the timer's interval and failures in a row as
# a short test timer would have them (the inventory's floor is 30 s); the long-prefill load:
# as many clients as keep the KV cache full and a queue behind it, each sending prompts of
# LOAD_PROMPT_TOKENS token ids (no tokenizer in the way) for a few tokens each.
WD_CHECK_TIMEOUT_S = 10.0
WD_INTERVAL_S = 15.0
WD_FAILURES = 2
LOAD_CLIENTS = 192
LOAD_PROMPT_TOKENS = 7000
LOAD_NEW_TOKENS = 16


def _watchdog_program():
    """The watchdog host program as shipped (RUN/watchdog.py beside its siblings)."""
    sys.path.insert(0, str(RUN))
    import watchdog  # the shipped host program, found at run time

    return watchdog


def _scheduler_pids(server: Server) -> list[int]:
    """SGLang's scheduler processes (their title: ``sglang::scheduler...``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"sglang::scheduler"):
            found.append(int(entry.name))
    return found


def _gauges(text: str) -> dict[str, float]:
    """The running and queued requests of a /metrics page."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
            if line.startswith(name + "{") or line.startswith(name + " "):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def watchdog_tick(wd, server: Server, start_timeout: float, case: str, seen: dict) -> dict:
    """One run of the watchdog's judgement, as its host program makes it (read_progress,
    decode_check, not_counted; ``seen["answered"]`` once a check got an answer, as its
    state's answered_activation), with SGLang's own /health and /health_generate beside it."""
    row: dict = {"case": case, "t_s": round(time.time() - server.started, 1)}
    statuses: dict = {}

    def probe(path: str) -> None:
        began = time.time()
        status = http("GET", path, timeout=30)[0]
        statuses[path] = {"status": status, "took_s": round(time.time() - began, 1)}

    probes = [threading.Thread(target=probe, args=(p,)) for p in ("/health", "/health_generate")]
    for thread in probes:
        thread.start()
    before = wd.read_progress(URL, API_KEY)
    began = time.time()
    result = wd.decode_check(URL, expect="Paris", api_key=API_KEY, timeout=WD_CHECK_TIMEOUT_S)
    row["check"] = {
        "reason": result["reason"],
        "ok": result["ok"],
        "took_s": round(time.time() - began, 1),
        "message": str(result.get("message") or "")[:160],
    }
    after = wd.read_progress(URL, API_KEY)
    for thread in probes:
        thread.join()
    row.update(statuses)
    row["progress"] = {"before": before[0], "after": after[0], "unread": before[1] or after[1]}
    status, _, page = http("GET", "/metrics", key=API_KEY, timeout=10)
    row["gauges"] = _gauges(page.decode(errors="replace")) if status == 200 else {}
    # Type=simple: active from the start; loading until a check got an answer.
    loading_s = None if seen.get("answered") else time.time() - server.started
    if result["reason"] not in wd.UNANSWERED:
        seen["answered"] = True
    if result["ok"]:
        row["verdict"] = "pass"
    else:
        excused = wd.not_counted(result["reason"], loading_s, start_timeout, before, after)
        row["verdict"] = excused[0] if excused else "counted"
        row["line"] = excused[1] if excused else wd.unread_progress(before, after)
    return row


def _long_prefill_load(stop: threading.Event, sent: list, client: int) -> None:
    """One client's requests, each prompt its own (no prefix cache hit): real prefill work."""
    request = 0
    while not stop.is_set():
        seed = client * 1_000_003 + request
        body = {
            "input_ids": [1000 + (seed + i * 7919) % 20000 for i in range(LOAD_PROMPT_TOKENS)],
            "sampling_params": {"max_new_tokens": LOAD_NEW_TOKENS, "temperature": 0},
        }
        sent.append(http("POST", "/generate", body, key=API_KEY, timeout=600)[0])
        request += 1


def scenario_watchdog(server: Server, out: Path, held: list, start_timeout: float) -> None:
    wd = _watchdog_program()
    rows: list[dict] = []
    seen: dict = {}

    def save() -> None:
        (out / "watchdog.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    # 1. Loading: a tick every few seconds from the start until /health answers 200.
    ready = False
    while server.alive() and time.time() - server.started < 600:
        row = watchdog_tick(wd, server, start_timeout, "loading", seen)
        rows.append(row)
        if row["/health"]["status"] == 200:
            ready = True
            break
        time.sleep(3)
    save()
    loading = [r for r in rows if r["case"] == "loading" and r["/health"]["status"] != 200]
    held.append(("server ready", ready, f"{time.time() - server.started:.0f} s"))
    held.append(
        (
            "loading: no failed check counted",
            bool(loading) and all(r["verdict"] == "starting" for r in loading),
            f"{len(loading)} checks: " + ", ".join(sorted({r["check"]["reason"] for r in loading})),
        )
    )
    if not ready:
        return
    rows.append(watchdog_tick(wd, server, start_timeout, "idle", seen))

    # 2. Saturated by long prefills: the check queues past its timeout while tokens move.
    stop, sent = threading.Event(), []
    clients = [
        threading.Thread(target=_long_prefill_load, args=(stop, sent, n), daemon=True)
        for n in range(LOAD_CLIENTS)
    ]
    for client in clients:
        client.start()
    time.sleep(20)  # the KV cache fills and a queue forms
    for _ in range(3):
        rows.append(watchdog_tick(wd, server, start_timeout, "saturated", seen))
    save()
    saturated = [r for r in rows if r["case"] == "saturated"]
    held.append(
        (
            "saturated: a check that did not pass was not counted",
            all(r["verdict"] in ("pass", "busy") for r in saturated),
            "; ".join(
                f"{r['check']['reason']} -> {r['verdict']}, /health {r['/health']['status']}, "
                f"/health_generate {r['/health_generate']['status']}"
                for r in saturated
            ),
        )
    )
    stop.set()

    # 3. The scheduler stopped (SIGSTOP): the timer's runs count failures until a restart.
    pids = _scheduler_pids(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped_at, failures, decided = time.time(), 0, None
    try:
        while decided is None and time.time() - stopped_at < 180:
            tick = time.time()
            row = watchdog_tick(wd, server, start_timeout, "sigstop", seen)
            failures = failures + 1 if row["verdict"] == "counted" else 0
            row["failures_in_a_row"] = failures
            rows.append(row)
            if failures >= WD_FAILURES:
                decided = time.time() - stopped_at
                break
            time.sleep(max(0.0, WD_INTERVAL_S - (time.time() - tick)))
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    save()
    bound = WD_FAILURES * WD_INTERVAL_S + WD_CHECK_TIMEOUT_S + 30
    held.append(
        (
            f"scheduler stopped: restart decided within failures x interval ({bound:.0f} s)",
            bool(pids) and decided is not None and decided <= bound,
            f"{len(pids)} scheduler(s) stopped; decided after "
            + (f"{decided:.0f} s" if decided is not None else "never"),
        )
    )
    held.append(("long-prefill requests answered", bool(sent), f"{len(sent)} done"))


def server_site() -> str:
    return os.environ.get("SGL_SITE", "/tmp/sglsite")


def run_bench(scenario: str, variant: str, folder: str, out: Path, held: list) -> None:
    target = Path(folder)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in ("gpu_sampler.py", "api_key.py", "bench_driver.py"):
        shutil.copy(RUN / name, target / name)
    start = time.time()
    done = subprocess.run(
        ["bash", str(RUN / f"{scenario}-{variant}.sh")], capture_output=True, text=True
    )
    wall = time.time() - start
    (target / "wall.json").write_text(json.dumps({"wall_s": wall, "rc": done.returncode}))
    (target / "script-output.txt").write_text(done.stdout + done.stderr)
    shutil.copy(RUN / f"{scenario}-profile.json", target / "profile.json")
    shutil.copy(RUN / f"{scenario}-settings.json", target / "settings.json")
    held.append(
        (
            f"{scenario} {variant}: benchmark ran",
            done.returncode == 0,
            f"rc {done.returncode} in {wall:.0f} s",
        )
    )
    with tarfile.open(out / f"{scenario}-{variant}.tgz", "w:gz") as tar:
        tar.add(target, arcname=f"{scenario}-{variant}")


def device(args: argparse.Namespace) -> int:
    out = Path(os.environ.get("OUT", "/tmp/realout")) / args.scenario
    out.mkdir(parents=True, exist_ok=True)
    plan = json.loads((RUN / f"{args.scenario}.json").read_text())
    server = Server((RUN / f"{args.scenario}.render").read_text(), out, args.scenario)
    held: list = []
    command = server.start()
    (out / "command.txt").write_text(shlex.join(command) + "\n")
    prometheus = None
    if args.prometheus and plan.get("monitoring"):
        prometheus = monitoring.Prometheus(
            monitoring.prometheus_kit(), RUN / plan["monitoring"], out
        )
    try:
        if args.scenario == "tiny":
            scenario_tiny(server, out, held)
        elif args.scenario == "watchdog":
            scenario_watchdog(server, out, held, plan["start_timeout_s"])
        else:
            ready = wait_ready(server, 600)
            held.append(("server ready", ready, f"{time.time() - server.started:.0f} s"))
            if ready and prometheus is not None:
                held.append(("Prometheus ready", prometheus.start(), "127.0.0.1:9090"))
            began = time.time()
            if ready:
                for variant, folder in plan["bench"].items():
                    if args.only and variant != args.only:
                        continue
                    run_bench(args.scenario, variant, folder, out, held)
            if ready and prometheus is not None:
                monitoring.capture_metrics(URL, out)
                time.sleep(2 * monitoring.INTERVAL_S)  # the last scrape and evaluation
                collected = prometheus.collect(began - 10, time.time())
                (out / "prometheus.json").write_text(json.dumps(collected))
                answered = sum(q["answer"].get("status") == "success" for q in collected["queries"])
                held.append(
                    (
                        "Prometheus answered",
                        True,
                        f"{answered} of {len(collected['queries'])} queries",
                    )
                )
    finally:
        if prometheus is not None:
            prometheus.stop()
        if server.alive():
            took = server.stop()
            held.append(("stopped on SIGTERM", True, f"{took:.1f} s"))
    lines = [f"{'HELD' if ok else 'DID NOT HOLD'}: {what} ({detail})" for what, ok, detail in held]
    (out / "held.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    log = server.log_path.read_text(errors="replace").splitlines()
    print("server log, last lines:", *log[-8:], sep="\n  ")
    with tarfile.open(out.parent / f"{args.scenario}.tgz", "w:gz") as tar:
        tar.add(out, arcname=args.scenario)
    shutil.rmtree(out)
    return 0 if all(ok for _, ok, _ in held) else 1


# --- summary (here, on what came back) --------------------------------------------------------


def summary(args: argparse.Namespace) -> int:
    from pyinfra_sglang.diagnosis.ab_compare import (
        compare,
        format_table,
        runs_by_concurrency,
    )
    from pyinfra_sglang.diagnosis.diagnose import diagnose_results, load_results
    from pyinfra_sglang.diagnosis.samples import read_json_lines
    from pyinfra_sglang.diagnosis.server_side import scaling_text
    from pyinfra_sglang.report.page import read_run, write_ab_report, write_report
    from pyinfra_sglang.served_benchmark.folder import METRICS_FILE
    from pyinfra_sglang.served_benchmark.server_metrics import summarize_polls

    folders = sorted(p for p in Path(args.folder).glob("*-*") if (p / "samples.jsonl").is_file())
    for folder in folders:
        # As deploy/bench.py does after a run: the poller's file summed up for the diagnosis.
        polls = folder / METRICS_FILE
        if polls.is_file() and not (folder / "server_metrics.json").is_file():
            summary = summarize_polls(polls.read_text().splitlines(), SGLANG_VERSION)
            if summary:
                (folder / "server_metrics.json").write_text(json.dumps(summary))
        results = load_results(folder)
        report = diagnose_results(results)
        wall = json.loads((folder / "wall.json").read_text())["wall_s"]
        measured = [s for s in results["steps"] if not s.warmup]
        span = sum(s.end - s.start for s in measured)
        print(f"{folder.name}: wall {wall:.1f} s, steps {span:.1f} s")
        for step in report["steps"]["steps"]:
            share = step["roofline_share"]
            print(
                f"  {step['label']:>8}: GPU busy in {step['busy_share']:.0%} of the step "
                f"({step['span_s']:.1f} s), {step['verdict']}"
                + (f", {share:.0%} of the roofline" if share is not None else "")
            )
        busy = sum(s["busy_share"] * s["span_s"] for s in report["steps"]["steps"]) / span
        print(
            f"  GPU-busy share of the steps' span: {busy:.0%}; run: {report['steps']['run_text']}"
        )
        if report.get("server"):
            print("\n".join(f"  {line}" for line in scaling_text(report["server"])))
        rows = read_json_lines(folder / "bench.jsonl")
        for row in rows:
            print(
                f"    c={row['max_concurrency']}: {row['output_throughput']:.1f} tok/s, "
                f"TPOT {row['median_tpot_ms']:.2f} ms"
            )
    on = [p for p in folders if p.name == "graphs-on-after"]
    off = [p for p in folders if p.name == "graphs-off-after"]
    if on and off:
        print("A/B: graphs off (A) against graphs on (B):")
        print(format_table(compare(runs_by_concurrency(off), runs_by_concurrency(on))))
        page = write_ab_report(read_run(off[0]), read_run(on[0]), Path(args.folder) / "ab-report")
        print(f"A/B report: {page}")
    for folder in folders:
        print(f"report: {write_report(read_run(folder), folder / 'report')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ready = sub.add_parser("prepare", help="render the scenarios into .sglkit/run (here)")
    ready.add_argument(
        "--dashboard",
        type=Path,
        help="a Grafana dashboard file whose panels Prometheus is asked for (SGLang's own)",
    )
    board = sub.add_parser("dashboard", help="draw what Prometheus answered (here)")
    board.add_argument("collected", type=Path, help="prometheus.json from a device run")
    board.add_argument("output", type=Path, help="the PNG to write")
    run = sub.add_parser("device", help="run a scenario (on the GPU machine)")
    run.add_argument("scenario", choices=sorted(SCENARIOS))
    run.add_argument("--only", choices=("before", "after"), help="one benchmark variant")
    run.add_argument(
        "--prometheus",
        action="store_true",
        help="scrape the server with real Prometheus (.promkit/prometheus.xz) where the "
        "scenario is monitored",
    )
    report = sub.add_parser("summary", help="figures from the returned run folders (here)")
    report.add_argument("folder", help="folder holding the unpacked <scenario>-<variant> runs")
    args = parser.parse_args(argv)
    commands = {"prepare": prepare, "device": device, "summary": summary, "dashboard": dashboard}
    return commands[args.command](args)


def dashboard(args: argparse.Namespace) -> int:
    print(monitoring.picture(args.collected, args.output))
    print(f"picture: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
