"""The diagnosis per benchmark step: each concurrency judged on the samples where its load ran.

A run's sampled span is mostly not load: the server idles while the benchmark starts, between
steps and after. Judged whole, a memory-bandwidth-bound decode (CUDA graphs on: GPU util 100%,
memory util 81-85% inside each step on a real H200) and a launch-bound one (graphs off: util
27-39%, one CPU core saturated) both read as a quiet GPU, "host-bound". So each step from
``steps.jsonl`` (its start and end on the host's clock, as the bench driver writes them) is cut
from the samples from where its requests began (the driver's ``load_start``), trimmed to where
load ran (from the first to the last sample in which a GPU showed activity), and judged by the
same rules
(diagnosis/bottlenecks.py). A concurrency's verdict is judged on all its repeats' windows
together; the run's verdict is the concurrencies' one when they agree.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.data_models import Diagnosis
from pyinfra_sglang.diagnosis.bottlenecks import diagnose, thresholds
from pyinfra_sglang.served_benchmark.limits import limits
from pyinfra_sglang.serving.roofline import DecodeRoofline, stream_rate

# Findings about the server's settings, not about what limits a window's load.
NOT_A_VERDICT = ("memory-capacity-bound",)
MIXED = "mixed"
MAX_NUMBER = limits().max_number


@dataclass(frozen=True)
class Step:
    """One benchmark call (or a labelled phase) on the sampler's time axis, in seconds."""

    label: str
    start: float
    end: float
    concurrency: int | None = None
    repeat: int | None = None
    warmup: bool = False
    # When the requests began (the bench driver's ``load_start``): before it the client makes
    # its prompts and loads its tokenizer, and the server idles.
    load_start: float | None = None


@dataclass(frozen=True)
class StepVerdict:
    """What limited one step (or all repeats of one concurrency)."""

    label: str
    concurrency: int | None
    span_s: float  # the step's span
    load_s: float  # the part of it in which load ran
    samples: int  # samples in the load window
    busy_share: float  # share of the step's samples in which some GPU was busy
    verdict: str  # the findings' code (``mixed`` when the GPUs disagree), ``idle`` without load
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    roofline_share: float | None = None  # this step's per-stream decode rate / the roofline

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "span_s": round(self.span_s, 3),
            "load_s": round(self.load_s, 3),
            "samples": self.samples,
            "busy_share": round(self.busy_share, 3),
            "verdict": self.verdict,
            "roofline_share": (
                round(self.roofline_share, 4) if self.roofline_share is not None else None
            ),
            "findings": [f.as_dict() for f in self.findings],
        }


def is_number(value: object) -> bool:
    """A finite int or float (not a bool) of at most ``max_number`` in size (data/diagnosis.toml
    [limits]): what the results files must hold where a number is read. NaN and infinities
    fail the comparison; a huge int is compared exactly, never converted to a float."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and -MAX_NUMBER <= value <= MAX_NUMBER
    )


def is_reading(value: object) -> bool:
    """A number as a measurement is: :func:`is_number` and not below 0."""
    return is_number(value) and value >= 0


def sample_offset(samples: list[dict]) -> float | None:
    """Unix seconds minus the samples' time axis (the sampler's ``time`` minus its ``t``);
    None when no sample carries both."""
    timed = next((s for s in samples if is_number(s.get("time")) and is_number(s.get("t"))), None)
    return None if timed is None else timed["time"] - timed["t"]


def steps_on_sample_axis(lines: list[dict], samples: list[dict]) -> list[Step]:
    """``steps.jsonl`` lines on the samples' time axis (the sampler's ``time``, Unix, minus its
    ``t``, since start, gives the offset); [] when no sample carries a ``time``. Each line is
    checked (a ValueError names what is wrong): ``start`` and ``end`` Unix seconds, and a
    ``label`` or a ``concurrency`` (and ``repeat``) to name it by."""
    offset = sample_offset(samples)
    if offset is None:
        return []
    repeats = {line.get("repeat") for line in lines if isinstance(line, dict)}
    steps = []
    for number, line in enumerate(lines, 1):
        where = f"line {number}"
        if not isinstance(line, dict):
            raise ValueError(f"{where} is not a JSON object")
        for key in ("start", "end"):
            if not is_number(line.get(key)):
                raise ValueError(f"{where}: {key} is {line.get(key)!r}, not Unix seconds")
        if line["end"] < line["start"]:
            raise ValueError(f"{where}: ends before it starts")
        # The bench driver runs one step at a time: steps that overlap are no run of it (and
        # would judge every sample once per step).
        if steps and line["start"] - offset < steps[-1].end:
            raise ValueError(f"{where}: starts before line {number - 1} ends")
        concurrency, repeat = line.get("concurrency"), line.get("repeat")
        concurrency = concurrency if isinstance(concurrency, int) and concurrency > 0 else None
        repeat = repeat if isinstance(repeat, int) else None
        load_start = line.get("load_start")
        if load_start is not None and not (
            is_number(load_start) and line["start"] <= load_start <= line["end"]
        ):
            raise ValueError(f"{where}: load_start is {load_start!r}, not within the step")
        label = line.get("label")
        if label is None:
            label = f"c={concurrency}"
            if len(repeats) > 1 and repeat is not None:
                label += f" #{repeat}"
        steps.append(
            Step(
                str(label),
                line["start"] - offset,
                line["end"] - offset,
                concurrency,
                repeat,
                line.get("warmup") is True,
                load_start - offset if load_start is not None else None,
            )
        )
    return steps


def _loaded(sample: dict, limits: Diagnosis) -> bool:
    """Some GPU showed work. Not the server's CPU: real SGLang's scheduler keeps ~100% of a
    core busy polling while idle (SGLang 0.5.17 on an H200, tests/fixtures/sglang-0.5.17-h200)."""
    active = limits.busy.active_gpu_util_pct
    return any((g.get("gpu_util") or 0) >= active for g in sample.get("gpus", []))


class _Timeline:
    """Samples in time order with their times, to cut a span out by bisection rather than by
    reading every sample once per step."""

    def __init__(self, samples: list[dict]):
        self.samples = sorted(samples, key=lambda s: s["t"])
        self.times = [s["t"] for s in self.samples]

    def between(self, begin: float, end: float) -> list[dict]:
        low, high = bisect_left(self.times, begin), bisect_right(self.times, end)
        return self.samples[low:high]


def load_window(
    samples: list[dict] | _Timeline, step: Step, limits: Diagnosis | None = None
) -> list[dict]:
    """The samples of ``step`` from its requests' start (``load_start``, else its start) to its
    end, trimmed to the first and last in which a GPU showed work (all of them when none did:
    an idle step stays idle)."""
    limits = limits or thresholds()
    timeline = samples if isinstance(samples, _Timeline) else _Timeline(samples)
    begin = step.load_start if step.load_start is not None else step.start
    inside = timeline.between(begin, step.end)
    loaded = [i for i, s in enumerate(inside) if _loaded(s, limits)]
    return inside[loaded[0] : loaded[-1] + 1] if loaded else inside


def verdict_of(findings: list[Finding]) -> str:
    """One word for a window's findings: their code when they agree, ``mixed`` otherwise."""
    codes = list(dict.fromkeys(f.code for f in findings if f.code not in NOT_A_VERDICT))
    if not codes:
        return "idle"
    return codes[0] if len(codes) == 1 else MIXED


def _busy_share(samples: list[dict], limits: Diagnosis) -> float:
    if not samples:
        return 0.0
    busy = limits.busy.gpu_util_pct
    return sum(
        any((g.get("gpu_util") or 0) >= busy for g in s.get("gpus", [])) for s in samples
    ) / len(samples)


def _judge(
    label: str,
    concurrency: int | None,
    steps: list[Step],
    samples: _Timeline,
    context: Mapping,
    rows: list[dict],
    limits: Diagnosis,
) -> StepVerdict:
    windows = [load_window(samples, step, limits) for step in steps]
    window = [s for w in windows for s in w]
    inside = [s for step in steps for s in samples.between(step.start, step.end)]
    load_s = sum(w[-1]["t"] - w[0]["t"] for w in windows if len(w) > 1)
    findings = (
        diagnose(
            window,
            context.get("gpu_facts"),
            context.get("virtualization"),
            rows,
            None,
            context.get("roofline"),
            context.get("served"),
            concurrency,
        )
        if window
        else []
    )
    roofline: DecodeRoofline | None = context.get("roofline")
    rates = [r for r in map(stream_rate, rows) if r]
    share = roofline.fraction(sum(rates) / len(rates)) if roofline and rates else None
    return StepVerdict(
        label=label,
        concurrency=concurrency,
        span_s=sum(step.end - step.start for step in steps),
        load_s=load_s,
        samples=len(window),
        busy_share=_busy_share(inside, limits),
        verdict=verdict_of(findings) if window else "idle",
        findings=tuple(findings),
        roofline_share=share,
    )


def rows_by_step(steps: list[Step], bench: list[dict]) -> dict[int, dict]:
    """Each measured step's bench_serving row: the rows are in step order (the driver writes
    one per step); by order within each concurrency when the counts differ."""
    if len(steps) == len(bench):
        return dict(enumerate(bench))
    found: dict[int, dict] = {}
    for concurrency in {s.concurrency for s in steps}:
        positions = [i for i, s in enumerate(steps) if s.concurrency == concurrency]
        rows = [r for r in bench if r.get("max_concurrency") == concurrency]
        found.update(zip(positions, rows))
    return found


def diagnose_steps(
    samples: list[dict], steps: list[Step], bench: list[dict], context: Mapping
) -> dict:
    """Verdicts per measured step and per concurrency, and the run's: ``{"steps": [...],
    "concurrencies": [...], "run": "<verdict>"}`` (StepVerdicts). ``context``: gpu_facts,
    virtualization, roofline, served (the server's settings, as ``diagnose`` takes them)."""
    limits = thresholds()
    timeline = _Timeline(samples)
    measured = [s for s in steps if not s.warmup]
    rows = rows_by_step(measured, bench)
    per_step = [
        _judge(step.label, step.concurrency, [step], timeline, context, [rows[i]], limits)
        if i in rows
        else _judge(step.label, step.concurrency, [step], timeline, context, [], limits)
        for i, step in enumerate(measured)
    ]
    per_concurrency = []
    # Repeats of a concurrency are judged together; a labelled phase without one on its own.
    groups = dict.fromkeys(s.concurrency if s.concurrency else s.label for s in measured)
    for group in groups:
        positions = [i for i, s in enumerate(measured) if group in (s.concurrency, s.label)]
        concurrency = group if isinstance(group, int) else None
        per_concurrency.append(
            _judge(
                f"c={group}" if concurrency else str(group),
                concurrency,
                [measured[i] for i in positions],
                timeline,
                context,
                [rows[i] for i in positions if i in rows],
                limits,
            )
        )
    verdicts = list(dict.fromkeys(v.verdict for v in per_concurrency))
    run = verdicts[0] if len(verdicts) == 1 else MIXED
    return {"steps": per_step, "concurrencies": per_concurrency, "run": run if verdicts else None}


def run_text(result: dict) -> str:
    """The run's verdict in a line: ``memory-bandwidth-bound at every concurrency`` or
    ``host-bound at c=1; memory-bandwidth-bound at c=64``."""
    concurrencies = result["concurrencies"]
    if not concurrencies:
        return "no measured step"
    if result["run"] != MIXED:
        return f"{result['run']} at every concurrency"
    return "; ".join(f"{v.verdict} at {v.label}" for v in concurrencies)
