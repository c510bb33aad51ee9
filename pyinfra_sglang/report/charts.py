"""The report's charts as PNG bytes: per-GPU timelines with the benchmark's steps marked, and
output throughput and TPOT against concurrency.

matplotlib draws through its Agg canvas directly (no pyplot: no global figure state, no GUI
backend chosen at import). The same input gives the same bytes: fixed size and DPI, the
default style pinned, and no "Software" tag in the PNG (Agg writes no date).
"""

from __future__ import annotations

import io
import statistics

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pyinfra_sglang import data
from pyinfra_sglang.data_models import Panel
from pyinfra_sglang.diagnosis.samples import NVLINK_COUNTER_BYTES
from pyinfra_sglang.diagnosis.steps import Step

DPI = 100
STYLE = {
    **matplotlib.rcParamsDefault,
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "path.simplify": False,  # every sample drawn: a short spike is what one looks for
}
# Shading of alternate steps, and the colour of each side of an A/B (matplotlib's first two).
STEP_SHADES = ("#dde6f2", "#f2eadd")
SIDE_COLOURS = {"A": "tab:blue", "B": "tab:orange"}
# Room above the highest point of a chart, so that its marker is not cut by the frame.
HEADROOM = 1.12


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(figure)
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _series(samples: list[dict], index: int, field: str, scale: float):
    times, values = [], []
    for sample in samples:
        for gpu in sample["gpus"]:
            if gpu["index"] == index and gpu.get(field) is not None:
                times.append(sample["t"])
                values.append(gpu[field] * scale)
    return times, values


def _counter_rates(samples: list[dict], index: int, counter: str, scale: float):
    """GB/s between consecutive samples of one cumulative NVLink counter (KiB per NVML)."""
    timed = [
        (s["t"], (g.get("nvlink_raw") or {}).get(counter))
        for s in samples
        for g in s["gpus"]
        if g["index"] == index
    ]
    times, values = [], []
    for (t0, a), (t1, b) in zip(timed, timed[1:]):
        if a is not None and b is not None and t1 > t0:
            times.append(t1)
            values.append((b - a) * NVLINK_COUNTER_BYTES / 1e9 / (t1 - t0) * scale)
    return times, values


def _mark_steps(axes, steps: list[Step], label_axes, max_labels: int) -> None:
    """Alternate steps shaded, one collection per shade (not a patch per step and panel:
    a thousand steps drew for minutes), and labelled when there are few enough to read."""
    for shade, colour in enumerate(STEP_SHADES):
        spans = [(s.start, s.end - s.start) for s in steps[shade::2]]
        for ax in axes:
            if spans:
                ax.broken_barh(
                    spans, (0, 1), transform=ax.get_xaxis_transform(), color=colour, zorder=0, lw=0
                )
    if len(steps) > max_labels:
        label_axes.set_title(
            f"{len(steps)} steps: too many to label", loc="left", fontsize=8, color="0.4"
        )
        return
    for step in steps:
        label_axes.text(
            (step.start + step.end) / 2,
            1.02,
            step.label,
            transform=label_axes.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            clip_on=False,
        )


def _top(panel: Panel, highest: float, capacities: dict[str, float | None]) -> float | None:
    """The y axis's top for ``panel`` (data/report.toml): its fixed ``top``; else at least its
    ``min_top`` and the capacity it names (the link's rate), and room above the highest
    reading. None: matplotlib's own."""
    if panel.top is not None:
        return float(panel.top)
    floor = max(panel.min_top or 0, capacities.get(panel.capacity or "") or 0)
    if not floor:
        return None
    return max(floor, highest * HEADROOM)


def timeline_axes(
    figure: Figure,
    samples: list[dict],
    index: int,
    steps: list[Step],
    title: str,
    capacities: dict[str, float | None] | None = None,
) -> list:
    """Draw GPU ``index``'s readings into ``figure``, one panel per data/report.toml entry;
    its axes. ``capacities``: ``{"pcie": GB/s per direction}`` where known (a panel with
    ``capacity = "pcie"`` reaches at least it, so that an idle link looks idle)."""
    report = data.report()
    panels = report.panel
    axes = figure.subplots(len(panels), 1, sharex=True)
    for ax, panel in zip(axes, panels):
        drawn, highest = False, 0.0
        for series in panel.series:
            if series.counter is not None:
                times, values = _counter_rates(samples, index, series.counter, series.scale)
            else:
                times, values = _series(samples, index, series.field, series.scale)
            if values:
                ax.plot(times, values, lw=1.2, label=series.label)
                drawn, highest = True, max(highest, max(values))
        limit = panel.limit
        if limit:
            _, ceiling = _series(samples, index, limit.field, 1)
            if ceiling:
                ax.axhline(max(ceiling), ls="--", lw=1, color="0.4", label=limit.label)
        # Rates, shares, clocks, watts: never below 0.
        ax.set_ylim(bottom=0, top=_top(panel, highest, capacities or {}))
        ax.set_ylabel(f"{panel.title}\n{panel.unit}")
        if drawn:
            ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
        else:
            ax.text(0.5, 0.5, "not sampled", transform=ax.transAxes, ha="center", color="0.4")
    _mark_steps(axes, steps, axes[0], report.steps.max_labels)
    axes[-1].set_xlabel("seconds since the sampler started")
    figure.suptitle(title, fontsize=10)
    return list(axes)


def timeline_png(
    samples: list[dict],
    index: int,
    steps: list[Step],
    title: str,
    capacities: dict[str, float | None] | None = None,
) -> bytes:
    """GPU ``index``'s readings over the run (:func:`timeline_axes`) as PNG bytes."""
    panels = data.report().panel
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(10, 1.7 * len(panels) + 0.8))
        timeline_axes(figure, samples, index, steps, title, capacities)
        figure.tight_layout()
        return png(figure)


def _by_concurrency(rows: list[dict], field: str) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {}
    for row in rows:
        concurrency, value = row.get("max_concurrency"), row.get(field)
        if isinstance(concurrency, int) and value is not None:
            found.setdefault(concurrency, []).append(value)
    return found


THROUGHPUT_PANELS = (
    # (field, label, its p99 or None)
    ("output_throughput", "output throughput, tok/s", None),
    ("median_tpot_ms", "TPOT, ms (median; p99 dashed)", "p99_tpot_ms"),
)


def throughput_axes(figure: Figure, sides: dict[str, list[dict]]) -> list:
    """Output throughput and TPOT (median, and p99 dashed where bench_serving wrote it)
    against concurrency into ``figure``: every run a dot, the means a line; one colour per
    side (``{"A": rows}`` alone for a single run). Each axis has room above its highest
    point. Its axes."""
    axes = figure.subplots(1, 2)
    concurrencies: set[int] = set()
    for ax, (field, label, p99) in zip(axes, THROUGHPUT_PANELS):
        highest = 0.0
        for side, rows in sides.items():
            colour = SIDE_COLOURS[side]
            name = side if len(sides) > 1 else None
            for key, style, shown in ((field, "-", "median"), (p99, "--", "p99")):
                found = _by_concurrency(rows, key) if key else {}
                concurrencies |= found.keys()
                for concurrency, values in sorted(found.items()):
                    ax.scatter([concurrency] * len(values), values, s=14, color=colour, alpha=0.6)
                    highest = max(highest, *values)
                means = [(c, statistics.fmean(v)) for c, v in sorted(found.items())]
                if means:
                    # "A" and "A p99" for an A/B; "median" and "p99" for one run.
                    legend = f"{name or ''} {shown}".strip() if p99 else name
                    if name and key == field:
                        legend = name
                    ax.plot(*zip(*means), ls=style, marker="o", lw=1.5, color=colour, label=legend)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0, top=highest * HEADROOM if highest > 0 else None)
        if len(sides) > 1 or p99:
            ax.legend(fontsize=8)
    for ax in axes:
        # Concurrencies double: a log axis spaces them evenly; ticks at those measured.
        if concurrencies and max(concurrencies) > 2 * min(concurrencies):
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(concurrencies), [str(c) for c in sorted(concurrencies)])
        ax.minorticks_off()
    return list(axes)


def throughput_png(sides: dict[str, list[dict]]) -> bytes:
    """:func:`throughput_axes` as PNG bytes."""
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(10, 3.6))
        throughput_axes(figure, sides)
        figure.tight_layout()
        return png(figure)


# The server's timeline under the GPU charts: SGLang's own numbers (diagnosis/server_side.py).
SERVER_PANELS = (
    ("requests", "", (("running", "running"), ("queued", "queued"))),
    ("KV cache", "share", (("token_usage", "token usage"),)),
    ("generation", "tok/s", (("gen_throughput", "generation throughput"),)),
)


def server_timeline_png(
    timeline: list[dict], steps: list[Step], title: str, offset: float, max_labels: int = 24
) -> bytes:
    """SGLang's running and queued requests, KV-cache use and generation throughput over the
    run, on the samples' time axis (``offset``: Unix seconds minus that axis), the steps
    marked as on the GPU charts."""
    timed = [r for r in timeline if isinstance(r.get("t"), (int, float))]
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(10, 1.7 * len(SERVER_PANELS) + 0.8))
        axes = figure.subplots(len(SERVER_PANELS), 1, sharex=True)
        for ax, (name, unit, series) in zip(axes, SERVER_PANELS):
            drawn = False
            for key, label in series:
                points = [(r["t"] - offset, r[key]) for r in timed if key in r]
                if points:
                    ax.plot(*zip(*points), lw=1.2, label=label)
                    drawn = True
            ax.set_ylim(bottom=0, top=1.05 if unit == "share" else None)
            ax.set_ylabel(f"{name}\n{unit}" if unit else name)
            if drawn:
                ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
            else:
                ax.text(0.5, 0.5, "not polled", transform=ax.transAxes, ha="center", color="0.4")
        _mark_steps(axes, steps, axes[0], max_labels)
        axes[-1].set_xlabel("seconds since the sampler started")
        figure.suptitle(title, fontsize=10)
        figure.tight_layout()
        return png(figure)
