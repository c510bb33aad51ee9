"""The server's side of each benchmark step: what SGLang itself reported while the step's load
ran (served_benchmark/server_metrics.py's timeline) against its own limits.

The GPU verdicts (diagnosis/steps.py) say what the GPUs and links did; they cannot see a
request waiting in SGLang's queue. On the real H200 (SGLang 0.5.17) a server capped at two
running requests gave exactly twice concurrency 1's throughput at concurrency 32, with 30
requests queued and the KV cache empty, and the GPUs read memory-bandwidth-bound; a KV cache
of 101,830 tokens ran full with 42 queued and retractions, and they read compute-bound. So
each step is also judged from the server's numbers:

- ``admission-capped``: requests queue while the running ones sit at ``max_running_requests``
  and the KV cache has room: the cap, not the GPUs, binds;
- ``kv-capacity-bound``: the KV cache at the top with requests queued, or requests retracted;
- ``prefix-cached``: most of the step's prompt tokens came from the prefix cache (a benchmark
  that repeats its prompts measures cache hits);
- ``prefill-faster-than-compute``: the step's median TTFT is below the time the GPUs need to
  compute its prompt at their dense rate: the prompt was not computed.

With the GPU verdicts beside them, the scaling table says per concurrency what the throughput
and the per-stream rate were, where the throughput stops growing and which limit binds there.

The timeline is judged only once it passes served_benchmark/server_metrics.py's
check_server_metrics (objects of numbers within bounds, times increasing): one that does not
gives no server verdict, and the report says it could not read the server side, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.data_models import DiagnosisServer
from pyinfra_sglang.served_benchmark.server_metrics import (
    MAX_VALUE,
    ServerMetricsError,
    check_server_metrics,
)
from pyinfra_sglang.serving.roofline import stream_rate

# Limits of the server that bind a load; then flags of a step that measured no prefill.
BINDING = ("admission-capped", "kv-capacity-bound")
SERVER_VERDICTS = (*BINDING, "prefix-cached", "prefill-faster-than-compute")


def thresholds() -> DiagnosisServer:
    return data.diagnosis().server


@dataclass(frozen=True)
class ServerLimits:
    """What the server admits: from the results' ``server_info`` (bench_serving copies the
    server's /server_info into every line) and its /metrics gauges."""

    max_running_requests: int | None = None
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    context_length: int | None = None


def _int(value) -> int | None:
    """A positive whole count, or None: bench_serving's server_info is not checked as the
    timeline is, so a bool, NaN, an infinity or an absurd size reads as unknown."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_VALUE:
        return int(value)
    return None


def server_limits(bench: list[dict], server: Mapping | None) -> ServerLimits:
    info = next((r["server_info"] for r in bench if isinstance(r.get("server_info"), dict)), {})
    states = info.get("internal_states")
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    # The cap the scheduler applies: set (max_running_requests) or derived from memory.
    running = _int(info.get("max_running_requests")) or _int(
        state.get("effective_max_running_requests_per_dp")
    )
    timeline = (server or {}).get("timeline") or []
    context = _int(info.get("context_length")) or next(
        (_int(r.get("context_len")) for r in timeline if _int(r.get("context_len"))), None
    )
    total = _int(info.get("max_total_num_tokens")) or next(
        (
            _int(r.get("max_total_num_tokens"))
            for r in timeline
            if _int(r.get("max_total_num_tokens"))
        ),
        None,
    )
    return ServerLimits(
        max_running_requests=running,
        max_total_num_tokens=total,
        chunked_prefill_size=_int(info.get("chunked_prefill_size")),
        context_length=context,
    )


@dataclass(frozen=True)
class StepServer:
    """SGLang's numbers over one step's load window."""

    label: str
    concurrency: int | None
    polls: int
    peak_running: float | None = None
    peak_queued: float | None = None
    peak_token_usage: float | None = None
    capped_polls: int = 0  # queued while running at the cap, the cache with room
    full_polls: int = 0  # queued while the cache is full
    retracted: float | None = None  # requests retracted in the window (counter difference)
    cached_share: float | None = None  # cached / prompt tokens in the window
    prompt_tokens: float | None = None
    median_ttft_ms: float | None = None
    prefill_floor_ms: float | None = None
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        result = asdict(self)
        result["findings"] = [f.as_dict() for f in self.findings]
        return result


def _window(timeline: list[dict], start: float, end: float) -> tuple[list[dict], dict, dict]:
    """The polls inside [start, end], and the counters' readings at each edge: the first
    poll at or after it. SGLang counts a request's tokens when it finishes and exports the
    totals a moment later (real 0.5.17: a warm-up that ended at 409.3 s showed in the poll
    at 409.5 s, not in the one at 408.4 s), so both edges read one poll late alike."""
    timed = [r for r in timeline if isinstance(r.get("t"), (int, float))]
    inside = [r for r in timed if start <= r["t"] <= end]

    def at(edge: float) -> dict:
        later = [r for r in timed if r["t"] >= edge]
        return later[0] if later else (timed[-1] if timed else {})

    return inside, at(start), at(end)


def _difference(first: dict, last: dict, key: str) -> float | None:
    if key not in last:
        return None
    return last[key] - first.get(key, 0.0)


def prefill_floor_ms(row: Mapping, prefill: Mapping | None) -> float | None:
    """The least time the GPUs need to compute one prompt of the step's mean length: 2 FLOP
    per active parameter per token, at the dense rate of every GPU serving it."""
    if not prefill or not row.get("completed"):
        return None
    tokens = (row.get("total_input_tokens") or 0) / row["completed"]
    if tokens <= 0:
        return None
    flop = 2 * prefill["active_params"] * tokens
    return flop / (prefill["dense_tflops"] * 1e12 * prefill["gpus"]) * 1000


def judge_step(
    label: str,
    concurrency: int | None,
    window: tuple[float, float],
    timeline: list[dict],
    row: Mapping | None,
    limits: ServerLimits,
    prefill: Mapping | None,
) -> StepServer:
    """One step's server numbers and verdicts."""
    rules = thresholds()
    inside, first, last = _window(timeline, *window)
    cap = limits.max_running_requests
    capped = [
        r
        for r in inside
        if cap
        and r.get("running", 0) >= cap
        and r.get("queued", 0) > 0
        and r.get("token_usage", 0) < rules.kv_full
    ]
    full = [r for r in inside if r.get("token_usage", 0) >= rules.kv_full and r.get("queued")]
    prompt = _difference(first, last, "prompt_tokens")
    cached = _difference(first, last, "cached_tokens")
    if prompt is not None and cached is None:
        cached = 0.0  # the counter appears once something was cached
    share = cached / prompt if prompt else None
    retracted = _difference(first, last, "retracted_requests")
    ttft = (row or {}).get("median_ttft_ms")
    floor = prefill_floor_ms(row or {}, prefill)

    def peak(key: str) -> float | None:
        values = [r[key] for r in inside if key in r]
        return max(values) if values else None

    findings = []
    if capped:
        worst = max(capped, key=lambda r: r["queued"])
        findings.append(
            Finding(
                "warn",
                "admission-capped",
                f"{label}: up to {worst['queued']:.0f} requests queued while {cap} ran, the "
                f"server's max_running_requests, with the KV cache at "
                f"{worst.get('token_usage', 0):.0%}: the cap binds, not the GPUs. Raise "
                f"max_running_requests (now {cap}) in sglang_profile_overrides.",
                evidence={
                    "max_running_requests": cap,
                    "queued": worst["queued"],
                    "token_usage": worst.get("token_usage"),
                    "polls": len(capped),
                },
            )
        )
    if full or (retracted or 0) > 0:
        usage = peak("token_usage")
        queued = max((r["queued"] for r in full), default=0)
        size = f" of {limits.max_total_num_tokens:,} tokens" if limits.max_total_num_tokens else ""
        findings.append(
            Finding(
                "warn",
                "kv-capacity-bound",
                f"{label}: the KV cache{size} ran {usage or 0:.0%} full with up to {queued:.0f} "
                f"requests queued and {retracted or 0:.0f} retracted: KV capacity binds. "
                "Raise mem_fraction_static, store the KV cache in fp8 (kv_cache_dtype), or "
                "serve on more GPUs (`pyinfra-sglang validate` refuses a profile whose weights "
                "and KV cache do not fit the GPUs an inventory plans for).",
                evidence={
                    "peak_token_usage": usage,
                    "queued": queued,
                    "retracted": retracted,
                    "max_total_num_tokens": limits.max_total_num_tokens,
                },
            )
        )
    if share is not None and share > rules.cached_share:
        findings.append(
            Finding(
                "warn",
                "prefix-cached",
                f"{label}: {share:.0%} of its {prompt:,.0f} prompt tokens came from the "
                "prefix cache: TTFT and input throughput measure cache hits, not prefill.",
                evidence={"cached_share": round(share, 4), "prompt_tokens": prompt},
            )
        )
    if ttft is not None and floor is not None and ttft < floor:
        findings.append(
            Finding(
                "warn",
                "prefill-faster-than-compute",
                f"{label}: median TTFT {ttft:.0f} ms is below the {floor:.0f} ms the GPUs "
                "need to compute the prompt at their dense rate: the prompt was not computed "
                "(served from the prefix cache).",
                evidence={"median_ttft_ms": ttft, "prefill_floor_ms": round(floor, 2)},
            )
        )
    return StepServer(
        label=label,
        concurrency=concurrency,
        polls=len(inside),
        peak_running=peak("running"),
        peak_queued=peak("queued"),
        peak_token_usage=peak("token_usage"),
        capped_polls=len(capped),
        full_polls=len(full),
        retracted=retracted,
        cached_share=share,
        prompt_tokens=prompt,
        median_ttft_ms=ttft,
        prefill_floor_ms=floor,
        findings=tuple(findings),
    )


def scaling_table(concurrencies: list[dict], growth_min: float | None = None) -> list[dict]:
    """Per concurrency (ascending): throughput, per-stream rate, the growth over the one
    before, and whether it still grows. ``concurrencies``: ``{"concurrency", "rows",
    "verdict", "server"}`` (the GPU verdict and the server verdicts' codes)."""
    growth_min = thresholds().growth_min if growth_min is None else growth_min
    table, previous = [], None
    for entry in sorted(concurrencies, key=lambda e: e["concurrency"]):
        rows = entry["rows"]
        throughputs = sorted(r["output_throughput"] for r in rows if r.get("output_throughput"))
        throughput = throughputs[len(throughputs) // 2] if throughputs else None
        rates = sorted(rate for r in rows if (rate := stream_rate(r)))
        growth = throughput / previous - 1 if throughput and previous else None
        table.append(
            {
                "concurrency": entry["concurrency"],
                "output_throughput": throughput,
                "stream_tokens_per_s": rates[len(rates) // 2] if rates else None,
                "growth": growth,
                "grows": growth is None or growth >= growth_min,
                "gpu_verdict": entry["verdict"],
                "server_verdicts": entry["server"],
            }
        )
        previous = throughput or previous
    return table


def binding_limit(table: list[dict]) -> str:
    """The run's headline: the first concurrency where a server limit binds (it names the
    setting to change) or the throughput stops growing (then the GPU verdict there), else
    that it grew throughout."""
    if not table:
        return "no measured step"
    for row in table:
        limits = [code for code in row["server_verdicts"] if code in BINDING]
        if limits or not row["grows"]:
            grew = "" if row["growth"] is None else f" (+{row['growth']:.0%} over the one before)"
            return f"{(limits or [row['gpu_verdict']])[0]} from c={row['concurrency']}{grew}"
    return f"throughput grew at every concurrency up to c={table[-1]['concurrency']}"


def prefill_spec(profile: Mapping | None) -> dict | None:
    """What the prefill roofline needs, from profile.json and the GPU table: active
    parameters, the GPUs serving (tp_size) and their dense bf16 rate; None where one lacks."""
    from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name

    if not profile or not profile.get("active_params_b") or not profile.get("gpu"):
        return None
    try:
        rate = gpu_by_name(profile["gpu"]).dense_bf16_tflops
    except UnknownGpuError:
        return None
    if not rate:
        return None
    return {
        "active_params": profile["active_params_b"] * 1e9,
        "dense_tflops": rate,
        "gpus": profile.get("tp_size") or 1,
    }


def server_report(
    server: Mapping,
    steps: list,
    rows: Mapping[int, dict],
    bench: list[dict],
    profile: Mapping | None,
    gpu_verdicts: Mapping[int, str],
    offset: float,
) -> tuple[dict, list[Finding]]:
    """The server's side of a run with steps: limits, each step's numbers and verdicts, the
    verdicts per concurrency, the scaling table and the headline; and the findings (one per
    concurrency and code). ``steps``: the measured steps on the samples' axis, ``rows``: their
    bench_serving rows by position, ``offset``: Unix seconds minus the samples' axis.

    A ``server`` that fails check_server_metrics gives :func:`unreadable_report` and no
    finding; its timeline is emptied in place, so that no later reader of the same results
    (the report's server chart) draws what was refused."""
    try:
        check_server_metrics(server)
    except ServerMetricsError as error:
        if isinstance(server, dict) and server.get("timeline") is not None:
            server["timeline"] = []
        return unreadable_report(str(error)), []
    timeline = [
        {**r, "t": r["t"] - offset}
        for r in server.get("timeline") or []
        if isinstance(r.get("t"), (int, float))
    ]
    limits = server_limits(bench, server)
    prefill = prefill_spec(profile)
    judged = [
        judge_step(
            f"c={step.concurrency}" if step.concurrency else step.label,
            step.concurrency,
            (step.load_start if step.load_start is not None else step.start, step.end),
            timeline,
            rows.get(position),
            limits,
            prefill,
        )
        for position, step in enumerate(steps)
    ]
    findings: list[Finding] = []
    concurrencies = []
    for concurrency in dict.fromkeys(s.concurrency for s in steps if s.concurrency):
        positions = [i for i, s in enumerate(steps) if s.concurrency == concurrency]
        codes: list[str] = []
        for position in positions:
            for finding in judged[position].findings:
                if finding.code not in codes:
                    codes.append(finding.code)
                    findings.append(finding)
        concurrencies.append(
            {
                "concurrency": concurrency,
                "rows": [rows[i] for i in positions if i in rows],
                "verdict": gpu_verdicts.get(concurrency),
                "server": codes,
            }
        )
    table = scaling_table(concurrencies)
    report = {
        "limits": asdict(limits),
        "steps": [{**s.as_dict(), "step": step.label} for s, step in zip(judged, steps)],
        "scaling": table,
        "headline": binding_limit(table),
    }
    return report, findings


def unreadable_report(reason: str) -> dict:
    """The server's side of a run whose server_metrics.json could not be read: no limits,
    steps or scaling rows, and a headline that says so in place of a verdict."""
    return {
        "unreadable": reason,
        "limits": {f.name: None for f in fields(ServerLimits)},
        "steps": [],
        "scaling": [],
        "headline": f"could not read the server side ({reason}): no server verdict",
    }


def scaling_text(report: Mapping) -> list[str]:
    """The scaling table and the headline as text lines."""
    lines = ["Scaling (SGLang's own numbers beside the GPU verdict):"]
    if report.get("unreadable"):
        return [*lines, f"  {report['headline']}"]
    limits = report["limits"]
    lines.append(
        "  limits: "
        + ", ".join(f"{key} {value:,}" for key, value in limits.items() if value is not None)
    )
    for row in report["scaling"]:
        throughput = row["output_throughput"]
        rate = row["stream_tokens_per_s"]
        growth = "" if row["growth"] is None else f" ({row['growth']:+.0%})"
        lines.append(
            f"  c={row['concurrency']}: "
            + (f"{throughput:.0f} tok/s{growth}" if throughput else "no throughput")
            + (f", {rate:.1f} tok/s per stream" if rate else "")
            + f"; GPUs {row['gpu_verdict'] or 'n/a'}"
            + (f"; server {', '.join(row['server_verdicts'])}" if row["server_verdicts"] else "")
        )
    for step in report["steps"]:
        if step["cached_share"] is not None:
            lines.append(
                f"  {step['step']}: prefix cache {step['cached_share']:.1%} of "
                f"{step['prompt_tokens']:,.0f} prompt tokens"
                + (
                    f", TTFT {step['median_ttft_ms']:.0f} ms (prefill floor "
                    f"{step['prefill_floor_ms']:.0f} ms)"
                    if step["median_ttft_ms"] is not None and step["prefill_floor_ms"]
                    else ""
                )
                + (f", up to {step['peak_queued']:.0f} queued" if step["peak_queued"] else "")
            )
    lines.append(f"  binds first: {report['headline']}")
    return lines
