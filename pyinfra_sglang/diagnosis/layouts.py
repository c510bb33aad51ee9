"""The diagnosis's answer to "would another TP/EP/DP-attention layout move less?": the
interconnect estimate (pyinfra_sglang/serving/parallelism.py) for the profile a run served, set
against the run's measured throughput and the link's bandwidth.

The best measured output rate times the layout's bytes per token is what each GPU's link
carried, by the estimate; its share of the link's bandwidth says whether bandwidth could
have limited the run. Interconnect-bound by the estimate when that share reaches the
diagnosis's saturation floor (data/diagnosis.toml [link] saturated_fraction); otherwise the
links' bandwidth did not limit it, and the collectives per step (latency) are named instead.
Either way the finding names the layout that would move the least among those that fit.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.gpus import GpuSpec
from pyinfra_sglang.serving import parallelism
from pyinfra_sglang.serving.layout import layout_of, tp_layout_problems
from pyinfra_sglang.serving.profiles import Profile


def _link(spec: GpuSpec | None, gpu_facts: Mapping[int, Mapping], tp_size: int):
    """The link the estimate divides by: the NVLink rate the host reported (links.json's
    nvlink_gbs, per direction), else the GPU's table figure or the measured PCIe one."""
    measured = [float(f["nvlink_gbs"]) for f in gpu_facts.values() if f.get("nvlink_gbs")]
    if measured:
        return parallelism.Link(min(measured), "NVLink as the host reported it")
    return parallelism.link_for(spec, spec is None or not spec.nvlink, tp_size)


def layout_finding(
    profile: Profile,
    tp_size: int,
    spec: GpuSpec | None,
    bench: list[dict],
    gpu_facts: Mapping[int, Mapping],
    saturated_fraction: float,
) -> Finding | None:
    """The interconnect-estimate finding; None where the profile lacks the model's shape,
    one GPU serves it, no link figure is known or no benchmark row delivered tokens."""
    if parallelism.shape_missing(profile) or tp_size <= 1:
        return None
    link = _link(spec, gpu_facts, tp_size)
    rows = [r for r in bench if (r.get("output_throughput") or 0) > 0]
    if link is None or not rows:
        return None
    best = max(rows, key=lambda r: r["output_throughput"])
    rate = float(best["output_throughput"])
    served = layout_of(profile, tp_size)
    now = parallelism.traffic(profile, served)
    carried_gbs = rate * now.total_bytes / 1e9
    share = carried_gbs / link.busbw_gbs
    memory = spec.memory_gb if spec else None
    fitting = [
        layout
        for layout in parallelism.candidate_layouts(profile, tp_size)
        if not parallelism.fit_note(profile, layout, memory)
        and not tp_layout_problems(layout, profile)
    ]
    least = min(fitting, key=lambda x: parallelism.traffic(profile, x).total_bytes, default=served)
    less = parallelism.traffic(profile, least)
    if least != served and less.total_bytes < now.total_bytes:
        advice = (
            f"of the layouts that fit, {least.name()} would move the least: "
            f"{less.total_bytes / 1e6:.2f} MB ({1 - less.total_bytes / now.total_bytes:.0%} "
            f"less), {less.collectives} collectives per step"
        )
    else:
        advice = "no layout that fits would move less"
    head = (
        f"{profile.name} as served ({served.name()}) moves {now.total_bytes / 1e6:.2f} MB per "
        f"token per GPU by the estimate; at the best measured {rate:.0f} output tok/s "
        f"(concurrency {best.get('max_concurrency', '?')}) that is {carried_gbs:.3g} GB/s, "
        f"{share:.1%} of the link's {link.busbw_gbs:g} GB/s ({link.source})"
    )
    bound = share >= saturated_fraction
    if bound:
        verdict = "interconnect-bound by the estimate: the link's bandwidth limits this load"
    else:
        verdict = (
            "the links' bandwidth did not limit this load; their latency might "
            f"({now.collectives} collectives per decode step, whatever the batch)"
        )
    return Finding(
        "warn" if bound else "ok",
        "interconnect-estimate",
        f"{head}: {verdict}. Try next: {advice} (docs/parallelism.md). Assumed: bandwidth only, "
        "bf16 activations, experts picked uniformly.",
        evidence={
            "layout": served.name(),
            "bytes_per_token_per_gpu": round(now.total_bytes),
            "collectives_per_step": now.collectives,
            "output_tokens_per_s": rate,
            "link_gbs": link.busbw_gbs,
            "link_share": round(share, 6),
            "least_traffic_layout": least.name(),
            "least_traffic_bytes": round(less.total_bytes),
        },
    )
