"""What one benchmark run on a host is: its settings (and their hash, which says which earlier
runs it may be compared with), the benchmark calls, and the shell script that runs them on the
host with the GPU sampler alongside."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass

from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.served_benchmark.bench_serving import bench_module, run_settings
from pyinfra_sglang.served_benchmark.folder import (
    BENCH_FILE,
    LOG_FILE,
    METRICS_FILE,
    SAMPLER_LOG_FILE,
    SAMPLES_FILE,
    STEPS_FILE,
)
from pyinfra_sglang.served_benchmark.server_metrics import poll_loop
from pyinfra_sglang.serving.service_files import server_url

SAMPLER_PROGRAM = "gpu_sampler.py"
# host_programs/bench_driver.py: every call of a run in one process (no start-up per call).
DRIVER_PROGRAM = "bench_driver.py"
KEY_READER_PROGRAM = "api_key.py"  # host_programs/api_key.py reads the service's key
# Exit status of the script when the API key cannot be read (bench_serving exits 1 or 2).
KEY_UNREADABLE = 90


@dataclass(frozen=True)
class BenchSettings:
    """Everything that makes two runs comparable: same settings, same hash."""

    concurrencies: tuple[int, ...]
    input_len: int
    output_len: int
    prompts_per_concurrency: int
    repeat: int
    backend: str
    dataset: str
    range_ratio: float
    sglang_version: str
    profile: str
    profile_overrides: dict

    def num_prompts(self, concurrency: int) -> int:
        return max(run_settings().min_prompts, self.prompts_per_concurrency * concurrency)

    def as_dict(self) -> dict:
        return {**asdict(self), "concurrencies": list(self.concurrencies)}

    def digest(self) -> str:
        """A hash that stays the same for the same settings, whatever order they were given."""
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def bench_settings(config: HostConfig, sglang_version: str) -> BenchSettings:
    """The settings of a run on a host with ``config`` whose venv holds ``sglang_version``."""
    fixed = run_settings()
    return BenchSettings(
        concurrencies=tuple(config.bench_concurrencies),
        input_len=config.bench_input_len,
        output_len=config.bench_output_len,
        prompts_per_concurrency=config.bench_prompts_per_concurrency,
        repeat=config.bench_repeat,
        backend=fixed.backend,
        dataset=fixed.dataset,
        range_ratio=float(fixed.range_ratio),
        sglang_version=sglang_version,
        profile=config.sglang_model_profile,
        # A/B runs change the served configuration through overrides: a different one is a
        # different experiment, never a regression of this one.
        profile_overrides=dict(config.sglang_profile_overrides),
    )


def bench_args(settings: BenchSettings, url: str, output_file: str) -> list[str]:
    """The benchmark's arguments for every call of a run; the bench driver sets each call's
    concurrency and prompt count. ``--base-url`` rather than ``--host``/``--port``: older
    releases join those without IPv6 brackets."""
    return [
        "--backend",
        settings.backend,
        "--base-url",
        url,
        "--dataset-name",
        settings.dataset,
        "--random-input-len",
        str(settings.input_len),
        "--random-output-len",
        str(settings.output_len),
        "--random-range-ratio",
        str(settings.range_ratio),
        "--output-file",
        output_file,
    ]


def _key_export(config_file: str) -> str:
    # The key goes from the 0600 file into this shell's environment only: never onto a
    # command line (ps shows those) nor into any output.
    return (
        f'OPENAI_API_KEY="$(python3 {KEY_READER_PROGRAM} {shlex.quote(config_file)})" || '
        f"{{ echo {shlex.quote(f'cannot read the API key from {config_file}')} >&2; "
        f"exit {KEY_UNREADABLE}; }}\n"
        "export OPENAI_API_KEY"
    )


def bench_script(
    config: HostConfig, settings: BenchSettings, folder: str, api_key_file: str | None
) -> str:
    """The script run on the host in ``folder`` (which holds the programs): the sampler and the
    /metrics poller in the background for the whole run, then one bench driver process for
    every repeat of every concurrency, after a warm-up at the highest concurrency; bounded; a
    failing call stops it and shows its log's tail."""
    fixed = run_settings()
    python = shlex.quote(f"{config.venv_path}/bin/python")
    calls = [(r, c) for r in range(1, settings.repeat + 1) for c in settings.concurrencies]
    top = max(settings.concurrencies)
    # Bounded even if nobody stops it: every call's timeout (the warm-up's too), and a minute.
    driver_s = (len(calls) + 1) * fixed.timeout_s + 30
    sampler_s = driver_s + 60
    lines = ["set -u", f"cd {shlex.quote(folder)}"]
    if api_key_file:
        lines.append(_key_export(api_key_file))
    lines += [
        f"{python} {SAMPLER_PROGRAM} --duration {int(sampler_s)} "
        f"--interval {float(fixed.sample_interval_s)} "
        f"--output {SAMPLES_FILE} 2>{SAMPLER_LOG_FILE} &",
        "sampler=$!",
        # SGLang's own state from its /metrics (running, queued, KV cache, prefix-cache hits,
        # retractions, its limits): the server-side verdicts per step.
        f"( {poll_loop(server_url(config) + '/metrics', METRICS_FILE, config.sglang_version)} ) &",
        "poller=$!",
        # However the script ends, the sampler and the poller stop with it (SIGTERM ends the
        # sampler cleanly).
        "trap 'kill $sampler $poller 2>/dev/null; wait $sampler $poller 2>/dev/null' EXIT",
    ]
    driver = [
        f"timeout {int(driver_s)}",
        python,
        DRIVER_PROGRAM,
        "--module",
        shlex.quote(bench_module(settings.sglang_version)),
        "--log",
        LOG_FILE,
        "--steps",
        STEPS_FILE,
        "--timeout",
        str(int(fixed.timeout_s)),
        "--warmup",
        f"{top},{settings.num_prompts(top)}",
        *(f"--step {r},{c},{settings.num_prompts(c)}" for r, c in calls),
        "--",
        *(shlex.quote(a) for a in bench_args(settings, server_url(config), BENCH_FILE)),
    ]
    lines.append(" ".join(driver))
    return "\n".join(lines) + "\n"
