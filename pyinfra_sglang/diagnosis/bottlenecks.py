"""Bottleneck rules: GPU samples (pyinfra_sglang.diagnosis.samples) -> findings naming what limits
the load.

Per GPU, first match wins (thresholds and why: pyinfra_sglang/data/diagnosis.toml):
``interconnect-bound`` (a PCIe or NVLink direction near its capacity), ``memory-bandwidth-bound``
(busy, memory utilization high, SM clock at its max, power under the limit: streaming HBM),
``compute-bound`` (busy, with power or clock evidence: NVML's GPU utilization also reads 100%
during pure copies, so busy alone is never taken for compute), ``interconnect-bound`` again for
a GPU that computes nothing while a link's two directions together keep it busy (copies taking
turns), ``undetermined`` (busy or links active, unexplained).
When every GPU is quiet (mostly idle, links idle): ``host-bound`` if load ran (the benchmark,
the server's CPU or some GPU activity says so), else ``idle``. ``memory-capacity-bound`` from
the server's KV cache use and queue.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.data_models import Diagnosis
from pyinfra_sglang.diagnosis.samples import (
    CpuSummary,
    GpuSummary,
    gpu_indexes,
    percentile,
    summarize_cpu,
    summarize_gpu,
)
from pyinfra_sglang.gpu_links.pcie import pcie_bandwidth_gbs
from pyinfra_sglang.gpus import find_gpu
from pyinfra_sglang.parsers.system import detected_vm
from pyinfra_sglang.serving.roofline import DecodeRoofline, stream_rate


def thresholds() -> Diagnosis:
    return data.diagnosis()


def link_capacity(summary: GpuSummary, pcie: Mapping | None) -> tuple[float | None, str]:
    """PCIe capacity per direction (GB/s) and its name ("Gen5 x16"). The max generation: the
    current one drops when idle and returns under load. The current width: it does not drop with
    the load, so a narrower one is a link trained down, and its narrower rate is the real one."""
    pcie = pcie or {}
    gen = pcie.get("gen_max") or summary.pcie_gen_max or pcie.get("gen_current")
    width = pcie.get("width_current") or summary.pcie_width or pcie.get("width_max")
    if not gen or not width:
        return None, "PCIe link of unknown rate"
    return pcie_bandwidth_gbs(int(gen), int(width)), f"PCIe Gen{int(gen)} x{int(width)}"


def nvlink_capacity(summary: GpuSummary, facts: Mapping) -> float | None:
    """NVLink GB/s per direction: links.json's ``nvlink_gbs``, else half the spec table's
    both-directions figure for the GPU's name (H200: 900 -> 450; a real GPU0->GPU1 copy
    reached 385)."""
    if facts.get("nvlink_gbs"):
        return float(facts["nvlink_gbs"])
    spec = find_gpu(summary.name) if summary.name else None
    return spec.nvlink_bandwidth_gbs / 2 if spec and spec.nvlink else None


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def format_gbs(value: float | None) -> str:
    """GB/s for real traffic, KB/s for the trickle of an idle link (the reference's 693 KB/s)."""
    if value is None:
        return "n/a"
    return f"{value:.2f} GB/s" if value >= 0.01 else f"{value * 1e6:.0f} KB/s"


@dataclass(frozen=True)
class _Link:
    name: str  # "PCIe Gen5 x16", "NVLink"
    capacity: float | None  # GB/s per direction
    series: tuple[float, ...]  # the busier direction, per sample
    both: tuple[float, ...]  # both directions added, per sample
    limits: Diagnosis

    @property
    def p90(self) -> float:
        return percentile(list(self.series), 90) or 0.0

    def _share_at_floor(self, series: tuple[float, ...]) -> float:
        if not self.capacity or not series:
            return 0.0
        floor = self.limits.link.saturated_fraction * self.capacity
        return sum(v >= floor for v in series) / len(series)

    @property
    def saturated_share(self) -> float:
        return self._share_at_floor(self.series)

    @property
    def busy_both_share(self) -> float:
        """Share of samples whose two directions together reach the saturated floor."""
        return self._share_at_floor(self.both)

    @property
    def idle(self) -> bool:
        link = self.limits.link
        if self.capacity:
            return self.p90 < link.idle_fraction * self.capacity
        return self.p90 < link.idle_gbs

    def text(self) -> str:
        median = statistics.median(self.series) if self.series else None
        share = ""
        if self.capacity:
            # Two significant digits: 98% of a saturated link, 0.0011% of an idle one.
            share = f" = {100 * self.p90 / self.capacity:.2g}% of {self.capacity:.1f} GB/s"
        return (
            f"{self.name} busier direction median {format_gbs(median)}, "
            f"p90 {format_gbs(self.p90)}{share}"
        )

    def both_text(self) -> str:
        both = list(self.both)
        return (
            f"{self.name} both directions added: median "
            f"{format_gbs(statistics.median(both) if both else None)}, p90 "
            f"{format_gbs(percentile(both, 90))} of {self.capacity or 0:.1f} GB/s per direction"
        )


class _GpuView:
    """One GPU's summary with its links and limits, and the facts the rules ask about."""

    def __init__(self, summary: GpuSummary, facts: Mapping, limits: Diagnosis):
        self.summary, self.limits = summary, limits
        pcie_capacity, pcie_name = link_capacity(summary, facts.get("pcie"))
        self.links = [
            _Link(
                pcie_name,
                pcie_capacity,
                summary.pcie_busier_series,
                summary.pcie_both_series,
                limits,
            )
        ]
        if summary.nvlink_busier_series:
            capacity = nvlink_capacity(summary, facts)
            self.links.append(
                _Link(
                    "NVLink",
                    capacity,
                    summary.nvlink_busier_series,
                    summary.nvlink_both_series,
                    limits,
                )
            )
        self.power_limit = facts.get("power_limit_w") or summary.power_limit_w
        self.clock_max = facts.get("sm_clock_max_mhz") or summary.sm_clock_max_mhz
        self.busy = summary.busy_share >= limits.busy.share

    @property
    def saturated_link(self) -> _Link | None:
        shares = [(link.saturated_share, link) for link in self.links]
        share, link = max(shares, key=lambda pair: pair[0])
        return link if share >= self.limits.link.share else None

    @property
    def busy_both_link(self) -> _Link | None:
        """A link whose two directions together are busy enough (copies taking turns)."""
        shares = [(link.busy_both_share, link) for link in self.links]
        share, link = max(shares, key=lambda pair: pair[0])
        return link if share >= self.limits.link.share else None

    @property
    def power_fraction(self) -> float | None:
        power = self.summary.busy_power_w
        return power / self.power_limit if power and self.power_limit else None

    @property
    def clock_fraction(self) -> float | None:
        clock = self.summary.busy_sm_clock_mhz
        return clock / self.clock_max if clock and self.clock_max else None

    @property
    def quiet(self) -> bool:
        return not self.busy and all(link.idle for link in self.links)

    def compute_evidence(self) -> list[str]:
        """Why the GPU's own work, not a copy, keeps it busy (empty: no such evidence)."""
        compute, summary = self.limits.compute, self.summary
        if (summary.busy_mem_util or 0) < compute.min_mem_util_pct:
            return []
        why = []
        if summary.busy_power_w and self.power_limit:
            fraction = summary.busy_power_w / self.power_limit
            if fraction >= compute.min_power_fraction:
                why.append(
                    f"power {summary.busy_power_w:.0f} W = {fraction:.0%} of the "
                    f"{self.power_limit:.0f} W limit"
                )
        if summary.busy_sm_clock_mhz and self.clock_max:
            fraction = summary.busy_sm_clock_mhz / self.clock_max
            if fraction <= compute.max_clock_fraction:
                why.append(
                    f"SM clock pulled down to {summary.busy_sm_clock_mhz:.0f} MHz = {fraction:.0%} "
                    f"of its {self.clock_max:.0f} MHz max"
                )
        return why

    def memory_evidence(self) -> list[str]:
        """Why streaming the GPU's own memory limits it (empty: no such evidence). Power and
        clock must be known: without them a busy memory cannot be told from a power-limited
        compute load that also reads a lot (so this says nothing rather than guess)."""
        memory, summary = self.limits.memory_bandwidth, self.summary
        power, clock = self.power_fraction, self.clock_fraction
        if not self.busy or power is None or clock is None:
            return []
        if (summary.busy_mem_util or 0) < memory.mem_util_pct:
            return []
        if clock <= self.limits.compute.max_clock_fraction:
            return []  # throttled: the power limit holds the arithmetic back
        return [
            f"memory utilization {summary.busy_mem_util:.0f}% (HBM busy that share of the time)",
            f"SM clock at {summary.busy_sm_clock_mhz:.0f} MHz = {clock:.0%} of its "
            f"{self.clock_max:.0f} MHz max: not throttled",
            f"power {summary.busy_power_w:.0f} W = {power:.0%} of the {self.power_limit:.0f} W "
            "limit",
        ]

    def load_text(self) -> str:
        summary = self.summary
        text = (
            f"busy in {summary.busy_share:.0%} of {summary.samples} samples "
            f"(GPU util median {_num(summary.gpu_util.median, '%')})"
        )
        if summary.busy_share == 0:
            return text
        return (
            f"{text}; while busy: memory util {_num(summary.busy_mem_util, '%')}, SM clock "
            f"{_num(summary.busy_sm_clock_mhz, ' MHz')} of {_num(self.clock_max, ' MHz')} max, "
            f"power {_num(summary.busy_power_w, ' W')} of {_num(self.power_limit, ' W')}"
        )

    def links_text(self) -> str:
        return "; ".join(link.text() for link in self.links)

    def evidence(self) -> dict:
        summary = self.summary
        return {
            "samples": summary.samples,
            "busy_share": round(summary.busy_share, 3),
            "gpu_util_median": summary.gpu_util.median,
            "mem_util_busy_median": summary.busy_mem_util,
            "sm_clock_busy_median_mhz": summary.busy_sm_clock_mhz,
            "sm_clock_max_mhz": self.clock_max,
            "power_busy_median_w": summary.busy_power_w,
            "power_limit_w": self.power_limit,
            "pcie_tx_median_gbs": summary.pcie_tx_gbs.median,
            "pcie_rx_median_gbs": summary.pcie_rx_gbs.median,
            "links": {
                link.name: {
                    "busier_p90_gbs": round(link.p90, 4),
                    "capacity_gbs": round(link.capacity, 2) if link.capacity else None,
                    "saturated_share": round(link.saturated_share, 3),
                }
                for link in self.links
            },
        }


NEXT_STEPS_MEMORY_BANDWIDTH = (
    "more tokens per byte read: larger batches (more concurrent requests, a larger "
    "max_running_requests or cuda_graph_max_bs), quantized weights and KV cache (FP8/FP4: "
    "fewer bytes per token), speculative decoding (MTP/EAGLE: several tokens per weight read), "
    "or more GPUs (TP: each reads a share of the weights)."
)

NEXT_STEPS_BY_LINK = {
    "PCIe": (
        "keep data on the GPU (fewer host<->device copies, pinned memory), put tensor-parallel "
        "peers on NVLink or under one PCIe switch (P2P), and check the link runs at its max "
        "generation and width under load."
    ),
    "NVLink": (
        "move less between GPUs: a smaller tensor-parallel size with data-parallel replicas, "
        "or expert parallelism for MoE models; check every NVLink is up (`nvidia-smi nvlink -s`)."
    ),
}


def _roofline_text(roofline: DecodeRoofline | None, bench: list[dict]) -> tuple[str, dict]:
    """The decode roofline and each benchmark row's share of it, as text and evidence."""
    if roofline is None:
        return "", {}
    runs = [(row, stream_rate(row)) for row in bench]
    shares = [
        f"concurrency {row.get('max_concurrency', '?')}: {rate:.1f} tok/s per stream = "
        f"{roofline.fraction(rate):.0%}"
        for row, rate in runs
        if rate
    ]
    text = (
        f" Decode roofline: {roofline.tokens_per_s:.0f} tok/s per stream "
        f"({roofline.gb_per_token:.3g} GB of weights per token at "
        f"{roofline.aggregate_bandwidth_gbs:.0f} GB/s; KV-cache reads left out)"
        + (f"; {'; '.join(shares)} of it." if shares else "; no benchmark rate to compare.")
    )
    evidence = {
        **roofline.as_dict(),
        "runs": [
            {
                "max_concurrency": row.get("max_concurrency"),
                "fraction_of_bound": (round(roofline.fraction(rate), 4) if rate else None),
            }
            for row, rate in runs
        ],
    }
    return text, evidence


def _link_finding(view: _GpuView, link: _Link, how: str) -> Finding:
    return Finding(
        "warn",
        "interconnect-bound",
        f"GPU {view.summary.index}: {how} ({view.links_text()}); {view.load_text()}. "
        f"The link limits this load (GPU utilization counts copies as busy). Try next: "
        f"{NEXT_STEPS_BY_LINK['NVLink' if link.name == 'NVLink' else 'PCIe']}",
        gpu=view.summary.index,
        evidence=view.evidence(),
    )


def _gpu_finding(
    view: _GpuView, roofline: DecodeRoofline | None = None, bench: list[dict] | None = None
) -> Finding | None:
    """The per-GPU rules, first match wins; None for a quiet GPU (judged host-wide)."""
    index = view.summary.index
    floor = view.limits.link.saturated_fraction
    link = view.saturated_link
    if link is not None:
        how = f"{link.name} ran at >= {floor:.0%} of its capacity in {link.saturated_share:.0%} "
        return _link_finding(view, link, how + "of samples")
    memory = view.memory_evidence()
    if memory:
        roof_text, roof_evidence = _roofline_text(roofline, bench or [])
        evidence = view.evidence()
        if roof_evidence:
            evidence["roofline"] = roof_evidence
        return Finding(
            "ok",
            "memory-bandwidth-bound",
            f"GPU {index}: {'; '.join(memory)}; {view.load_text()}; links not saturated "
            f"({view.links_text()}). Streaming the GPU's own memory limits this load, not "
            f"arithmetic: the memory bandwidth is used.{roof_text} Try next: "
            f"{NEXT_STEPS_MEMORY_BANDWIDTH}",
            gpu=index,
            evidence=evidence,
        )
    why = view.compute_evidence()
    if view.busy and why:
        return Finding(
            "ok",
            "compute-bound",
            f"GPU {index}: {'; '.join(why)}; {view.load_text()}; links not saturated "
            f"({view.links_text()}). The GPU's own work limits this load: the hardware is used. "
            "Try next: faster kernels (FP8/FP4 weights and KV cache, another attention "
            "backend), speculative decoding (MTP) for more tokens per weight read, or more GPUs "
            "(TP/DP).",
            gpu=index,
            evidence=view.evidence(),
        )
    link = view.busy_both_link
    if link is not None and not why:
        how = (
            f"{link.name}'s two directions together carried >= {floor:.0%} of one direction's "
            f"capacity in {link.busy_both_share:.0%} of samples ({link.both_text()}), neither "
            "alone near it, while the GPU computed nothing: copies taking turns"
        )
        return _link_finding(view, link, how)
    if view.quiet:
        return None
    what = "busy" if view.busy else "moving data"
    return Finding(
        "warn",
        "undetermined",
        f"GPU {index}: {what}, but neither compute evidence nor a saturated link explains it "
        f"({view.load_text()}; {view.links_text()}). Likely a transfer no counter here sees, "
        "or short kernels; if the samples mix phases, diagnose a window of steady load. Try "
        "next: read NVLink throughput (`nvidia-smi nvlink -gt d`), profile with nsys.",
        gpu=index,
        evidence=view.evidence(),
    )


def _load_evidence(views: list[_GpuView], bench: list[dict], limits: Diagnosis) -> list[str]:
    """Why we believe load ran while sampling (empty: no sign of it)."""
    why = []
    ran = [r for r in bench if (r.get("completed") or 0) + (r.get("output_throughput") or 0) > 0]
    if ran:
        best = max(ran, key=lambda r: r.get("output_throughput") or 0)
        why.append(
            f"the benchmark delivered {best.get('output_throughput') or 0:.0f} output tok/s at "
            f"concurrency {best.get('max_concurrency', '?')}"
        )
    # A busy server process alone is no sign of load: real SGLang's scheduler polls at ~100%
    # of a core while idle (tests/fixtures/sglang-0.5.17-h200).
    floor = limits.busy.active_gpu_util_pct
    active = [str(v.summary.index) for v in views if (v.summary.gpu_util.median or 0) >= floor]
    if active:
        why.append(f"GPUs {', '.join(active)} showed some activity (util median >= {floor}%)")
    return why


def _cpu_text(cpu: CpuSummary | None) -> str:
    if cpu is None:
        return "server CPU use not sampled"
    return (
        f"{cpu.processes} server processes used {_num(cpu.percent.median, '%')} of one core in "
        f"total (median; busiest process p90 {_num(cpu.max_process_percent.p90, '%')})"
    )


def launch_advice(served: Mapping | None, concurrency: int | None) -> str:
    """What to try against launch/host-bound decode, from the server's own settings where they
    are known (``served``: ``{"cuda_graph": bool, "cuda_graph_max_bs": int | None}``). On one
    H200 (8B shape, SGLang 0.5.17) CUDA graphs made decode 3.7x faster at concurrency 1."""
    rest = "a faster or unshared CPU core for the scheduler, py-spy on the scheduler."
    graphs = (served or {}).get("cuda_graph")
    if graphs is False:
        return (
            "CUDA graphs are off on this server (--disable-cuda-graph): turn them on (the "
            "profile's cuda_graph = true); they replay each decode step's kernels in one "
            f"launch. Then: larger batches, {rest}"
        )
    if graphs is True:
        max_bs = (served or {}).get("cuda_graph_max_bs")
        if isinstance(max_bs, int) and concurrency and concurrency > max_bs:
            return (
                f"CUDA graphs are on, but concurrency {concurrency} is above cuda_graph_max_bs "
                f"{max_bs}: larger decode batches run without graphs; raise cuda_graph_max_bs "
                f"to {concurrency} or more. Then: {rest}"
            )
        return (
            "CUDA graphs are already on, so launches are not the cause they would be without "
            f"them: larger batches (more concurrent requests), {rest}"
        )
    return f"CUDA graphs for decode (if off), larger batches, {rest}"


def _quiet_host_finding(
    views: list[_GpuView],
    cpu: CpuSummary | None,
    bench: list[dict],
    virtualization: Mapping | None,
    limits: Diagnosis,
    served: Mapping | None = None,
    concurrency: int | None = None,
) -> Finding:
    utils = [v.summary.gpu_util.median for v in views if v.summary.gpu_util.median is not None]
    busiest = max(views, key=lambda v: max(link.p90 for link in v.links))
    summary = (
        f"GPUs {', '.join(str(v.summary.index) for v in views)} busy in at most "
        f"{max(v.summary.busy_share for v in views):.0%} of samples (GPU util median "
        f"{_num(statistics.median(utils) if utils else None, '%')}); busiest links: GPU "
        f"{busiest.summary.index} {busiest.links_text()}; {_cpu_text(cpu)}"
    )
    evidence = {
        "gpus": {v.summary.index: v.evidence() for v in views},
        "cpu": asdict(cpu) if cpu else None,
    }
    why = _load_evidence(views, bench, limits)
    if not why:
        return Finding(
            "warn",
            "idle",
            f"No load while sampling: {summary}. Nothing to diagnose: sample while the "
            "benchmark runs.",
            evidence=evidence,
        )
    busy_process = cpu is not None and (
        (cpu.max_process_percent.p90 or 0) >= limits.host.busy_process_cpu_pct
    )
    if busy_process:
        cause = (
            "a server process keeps a core busy: launch/host-bound (Python scheduling, "
            f"tokenization, kernel launches). Try next: {launch_advice(served, concurrency)}"
        )
    else:
        cause = (
            "the server's processes mostly wait as well: the time goes between host and GPUs or "
            "outside the server (client, network, driver round-trips). Try next: profile a "
            "decode step (nsys, torch profiler), run the benchmark client on the host itself, "
            "compare with bare metal."
        )
    vm = detected_vm(virtualization)
    if vm:
        cause += (
            f" The host is a VM ({vm}): launches, interrupts and doorbells cross the "
            "hypervisor, and PCIe peer traffic goes through the host bridge; check vCPU "
            "pinning, the IOMMU mode and whether the hypervisor exposes GPU P2P."
        )
    return Finding(
        "warn",
        "host-bound",
        f"Load ran ({'; '.join(why)}) but neither the GPUs nor the links were busy: {summary}. "
        f"The bottleneck is on the host side: {cause}",
        evidence={**evidence, "load": why, "virtualization": dict(virtualization or {})},
    )


def _memory_capacity_finding(server: Mapping | None, limits: Diagnosis) -> Finding | None:
    usage = (server or {}).get("kv_cache_usage")
    queued = (server or {}).get("queued_requests")
    memory = limits.memory_capacity
    if usage is None or queued is None:
        return None
    if usage < memory.kv_cache_usage or queued <= memory.queued_requests:
        return None
    return Finding(
        "warn",
        "memory-capacity-bound",
        f"KV cache {usage:.0%} full with {queued} requests queued: requests wait for cache "
        "room, not for compute. Try next: a larger mem_fraction_static (0.85 -> 0.92 grew the "
        "reference's KV cache from 370K to 498K tokens), an FP8 KV cache, more GPUs, or a "
        "lower max concurrency.",
        evidence={"kv_cache_usage": usage, "queued_requests": queued},
    )


def diagnose(
    samples: list[dict],
    gpu_facts: Mapping[int, Mapping] | None = None,
    virtualization: Mapping | None = None,
    bench: list[dict] | None = None,
    server: Mapping | None = None,
    roofline: DecodeRoofline | None = None,
    served: Mapping | None = None,
    concurrency: int | None = None,
) -> list[Finding]:
    """Findings for ``samples`` (pyinfra_sglang.diagnosis.samples' shape).

    ``gpu_facts``: per GPU index ``{"pcie": {"gen_current", "gen_max", "width_current",
    "width_max"}, "power_limit_w", "sm_clock_max_mhz", "nvlink_gbs"}`` (NVLink capacity per
    direction; what is missing comes from the samples and the GPU spec table);
    ``virtualization``: ``{"container", "vm"}``; ``bench``: bench_serving rows; ``server``:
    ``{"kv_cache_usage": 0..1, "queued_requests": n}``; ``roofline``: the model's decode
    roofline, whose share each bench row reached a memory-bandwidth-bound finding names;
    ``served``: the server's settings (``{"cuda_graph", "cuda_graph_max_bs"}``), and
    ``concurrency`` the load's, which the advice for launch-bound load uses.
    """
    limits = thresholds()
    gpu_facts = gpu_facts or {}
    busy_util = limits.busy.gpu_util_pct
    views = [
        _GpuView(summarize_gpu(samples, index, busy_util), gpu_facts.get(index, {}), limits)
        for index in gpu_indexes(samples)
    ]
    findings = [f for f in (_gpu_finding(v, roofline, bench) for v in views) if f is not None]
    quiet = [v for v in views if v.quiet]
    if views and len(quiet) == len(views):
        cpu = summarize_cpu(samples)
        findings.append(
            _quiet_host_finding(
                views, cpu, bench or [], virtualization, limits, served, concurrency
            )
        )
    elif quiet:
        working = [str(v.summary.index) for v in views if not v.quiet]
        working_text = f"GPU{'s' if len(working) > 1 else ''} {', '.join(working)}"
        findings += [
            Finding(
                "warn",
                "idle",
                f"GPU {v.summary.index}: idle while {working_text} worked ({v.load_text()}; "
                f"{v.links_text()}): is the tensor-parallel size smaller than the GPU count?",
                gpu=v.summary.index,
                evidence=v.evidence(),
            )
            for v in quiet
        ]
    capacity = _memory_capacity_finding(server, limits)
    return findings + ([capacity] if capacity else [])
