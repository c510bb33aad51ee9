"""``pyinfra-sglang report RESULTS_DIR [RESULTS_DIR_B] [--output DIR]``: one HTML page of a
benchmark run, or an A/B page of two.

The page (``report.html``) holds per-GPU timelines of utilization, memory utilization, PCIe and
NVLink rates, SM clock and power with the benchmark's steps marked, output throughput and
median TPOT against concurrency, and the diagnosis's findings beside them. Its charts are PNG
files beside it and, as data URIs, in the page itself, so the page alone can be mailed or
attached to a ticket. It has no script and loads nothing from the network. Every value read
from the results is HTML-escaped.

RESULTS_DIR is a deploy/bench.py run folder (the formats are in diagnosis/diagnose.py; the
step marks come from ``steps.jsonl``, written by the bench script). Exit status 0 when a page
was written, 2 when a folder holds no results or cannot be read.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.diagnosis.ab_compare import (
    Comparison,
    compare,
    percent,
    runs_by_concurrency,
)
from pyinfra_sglang.diagnosis.diagnose import (
    ResultsError,
    diagnose_results,
    load_results,
)
from pyinfra_sglang.diagnosis.samples import gpu_indexes
from pyinfra_sglang.diagnosis.steps import Step, is_number, sample_offset
from pyinfra_sglang.report.charts import server_timeline_png, throughput_png, timeline_png
from pyinfra_sglang.safe_write import OutputFolder, UnsafeOutputError
from pyinfra_sglang.served_benchmark.folder import (
    BENCH_FILE,
    SAMPLES_FILE,
    SAMPLES_FILE_BEFORE,
    SETTINGS_FILE,
    STEPS_FILE,
)
from pyinfra_sglang.served_benchmark.limits import load_json

PAGE = "report.html"
# bench_serving fields shown per run, with their headings and decimals.
BENCH_COLUMNS = (
    ("max_concurrency", "concurrency", 0),
    ("completed", "completed", 0),
    ("output_throughput", "output tok/s", 1),
    ("median_ttft_ms", "median TTFT ms", 1),
    ("p99_ttft_ms", "p99 TTFT ms", 1),
    ("median_tpot_ms", "median TPOT ms", 1),
    ("p99_tpot_ms", "p99 TPOT ms", 1),
    ("duration", "duration s", 1),
)
SETTINGS_SHOWN = (
    "profile",
    "sglang_version",
    "concurrencies",
    "input_len",
    "output_len",
    "repeat",
    "profile_overrides",
)
CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #1a1a1a; max-width: 1500px; }
h1 { font-size: 1.4em; overflow-wrap: anywhere; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.pair { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1.5em;
        align-items: start; }
/* Side by side only where both fit: below, one above the other (at 900 px the benchmark
   table ran under the findings). */
@media (max-width: 1200px) { .pair { grid-template-columns: minmax(0, 1fr); } }
.pair > div, p, li { min-width: 0; overflow-wrap: anywhere; }
figure { margin: 1em 0; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
/* A table wider than its column scrolls inside its box, never over its neighbour. */
.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right;
         overflow-wrap: normal; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
ul.findings { padding-left: 0; list-style: none; font-size: 0.9em; }
ul.findings li { margin-bottom: 0.7em; padding: 0.4em 0.6em; border-left: 4px solid #999; }
li.ok { border-color: #2e7d32 !important; } li.warn { border-color: #ef6c00 !important; }
li.fail { border-color: #c62828 !important; }
.level { font-weight: bold; text-transform: uppercase; }
.note { color: #555; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class Run:
    """One run folder, read and diagnosed."""

    folder: Path
    name: str  # "<host> / <timestamp>": the folder and its parent, as deploy/bench.py names them
    results: dict
    report: dict
    notes: tuple[str, ...]
    steps: tuple[Step, ...]
    settings: dict | None


def _found(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    if not names:
        return "found an empty folder"
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"found {shown}"


def _check_has_results(folder: Path) -> None:
    """ResultsError saying what a run folder holds and what this one holds instead."""
    if not folder.is_dir():
        raise ResultsError(
            f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}, expected a "
            "deploy/bench.py run folder"
        )
    if any((folder / name).is_file() for name in (SAMPLES_FILE, SAMPLES_FILE_BEFORE)):
        return
    hint = ""
    runs = [p for p in folder.iterdir() if p.is_dir() and (p / SAMPLES_FILE).is_file()]
    if runs:
        hint = f" (it holds run folders: give one, e.g. {sorted(runs)[-1]})"
    raise ResultsError(
        f"{folder}: no results: expected {SAMPLES_FILE} (the GPU sampler's) and {BENCH_FILE} "
        f"(bench_serving's), as a deploy/bench.py run folder holds them; {_found(folder)}{hint}"
    )


def read_run(folder: str | Path) -> Run:
    """A run folder, read and diagnosed; ResultsError when it holds no results or a file in it
    cannot be read. The roofline is left out (and said why) when its numbers are missing."""
    folder = Path(folder)
    _check_has_results(folder)
    results = load_results(folder)
    notes = []
    try:
        report = diagnose_results(results)
    except (ValueError, KeyError, PyinfraError) as error:
        report = diagnose_results({**results, "profile": None})
        notes.append(f"no decode roofline: {error}")
    steps = results["steps"]
    if not steps:
        notes.append(f"no {STEPS_FILE} with sampler times: the benchmark's steps are not marked")
    settings = None
    if (folder / SETTINGS_FILE).is_file():
        try:
            settings = load_json(folder / SETTINGS_FILE).get("settings")
        except (OSError, ValueError, AttributeError):
            notes.append("settings.json cannot be read: settings not shown")
    name = f"{folder.resolve().parent.name} / {folder.resolve().name}"
    return Run(folder, name, results, report, tuple(notes), tuple(steps), settings)


# --- the output folder ------------------------------------------------------------------------

# --- HTML ------------------------------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _png_size(data: bytes) -> tuple[int, int]:
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def _image(file: str, data: bytes, alt: str) -> str:
    width, height = _png_size(data)
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return (
        f'<figure><a href="{_e(file)}"><img src="{uri}" alt="{_e(alt)}" width="{width}" '
        f'height="{height}"></a></figure>'
    )


def _findings(run: Run, heading: str) -> str:
    items = [
        f'<li class="{_e(f.level)}"><span class="level">{_e(f.level)}</span> '
        f"<code>{_e(f.code)}</code>: {_e(f.message)}</li>"
        for f in run.report["findings"]
    ]
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in run.notes)
    return f'<div><h2>{_e(heading)}</h2><ul class="findings">{"".join(items)}</ul>{notes}</div>'


def _cell(value: object, decimals: int) -> str:
    if is_number(value):
        return _e(f"{value:.{decimals}f}")
    return "" if value is None else _e(value)


def _no_bench(name: str) -> str:
    """The one line said in place of the charts and table of a run without benchmark rows."""
    return (
        f'<p class="note">{_e(name)} has no benchmark results (no line in {BENCH_FILE}): no '
        "throughput or TPOT to chart.</p>"
    )


def _bench_table(run: Run) -> str:
    if not run.results["bench"]:
        return _no_bench(run.name)
    head = "".join(f"<th>{_e(title)}</th>" for _, title, _ in BENCH_COLUMNS)
    rows = [
        "<tr>" + "".join(f"<td>{_cell(row.get(k), d)}</td>" for k, _, d in BENCH_COLUMNS) + "</tr>"
        for row in run.results["bench"]
    ]
    return f'<div class="table"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def _verdict_table(run: Run) -> str:
    """The verdict of each benchmark step, judged where its load ran (diagnosis/steps.py)."""
    by_step = run.report.get("steps")
    if not by_step:
        return ""
    head = (
        '<tr><th class="text">step</th><th class="text">verdict</th><th>load s</th>'
        "<th>step s</th><th>GPU busy</th><th>roofline</th></tr>"
    )
    rows = [
        f'<tr><td class="text">{_e(v["label"])}</td><td class="text"><code>{_e(v["verdict"])}'
        f"</code></td><td>{v['load_s']:.1f}</td><td>{v['span_s']:.1f}</td>"
        f"<td>{v['busy_share']:.0%}</td><td>"
        + (f"{v['roofline_share']:.0%}" if v["roofline_share"] is not None else "")
        + "</td></tr>"
        for v in by_step["steps"]
    ]
    return (
        f'<h2>Verdict per step</h2><div class="table"><table>{head}{"".join(rows)}</table></div>'
        f'<p class="note">Run: {_e(by_step["run_text"])}. Each step is judged on the samples '
        "where its load ran, not on the whole sampled span.</p>"
    )


def _settings(run: Run) -> str:
    facts = []
    if run.settings:
        facts += [
            f"{_e(key)}: {_e(json.dumps(run.settings[key]))}"
            for key in SETTINGS_SHOWN
            if key in run.settings
        ]
    names = sorted({g["name"] for g in run.report["gpus"] if g.get("name")})
    if names:
        facts.append(f"GPUs: {len(run.report['gpus'])} x {_e(', '.join(names))}")
    return f'<p class="note">{"; ".join(facts)}</p>' if facts else ""


def _timelines(run: Run, out: OutputFolder, prefix: str, side: str) -> str:
    parts = []
    capacity = {g["index"]: g.get("pcie_capacity_gbs") for g in run.report["gpus"]}
    for index in gpu_indexes(run.results["samples"]):
        file = f"{prefix}gpu{index}-timeline.png"
        data = timeline_png(
            run.results["samples"],
            index,
            list(run.steps),
            f"{side}{run.name}: GPU {index}",
            {"pcie": capacity.get(index)},
        )
        out.write(file, data)
        parts.append(_image(file, data, f"{side}GPU {index} timeline of {run.name}"))
    return "".join(parts)


def _server(run: Run, out: OutputFolder) -> str:
    """SGLang's own side: the scaling table and its timeline, where /metrics was polled with
    times (diagnosis/server_side.py); nothing otherwise."""
    server = run.report.get("server")
    timeline = (run.results.get("server") or {}).get("timeline") or []
    offset = sample_offset(run.results["samples"])
    if not server or offset is None:
        return ""
    head = (
        "<tr><th>c</th><th>tok/s</th><th>growth</th><th>tok/s per stream</th>"
        '<th class="text">GPUs</th><th class="text">server</th></tr>'
    )
    rows = [
        f"<tr><td>{row['concurrency']}</td><td>{_cell(row['output_throughput'], 0)}</td><td>"
        + ("" if row["growth"] is None else f"{row['growth']:+.0%}")
        + f"</td><td>{_cell(row['stream_tokens_per_s'], 1)}</td>"
        f'<td class="text"><code>{_e(row["gpu_verdict"] or "")}</code></td>'
        f'<td class="text"><code>{_e(", ".join(row["server_verdicts"]))}</code></td></tr>'
        for row in server["scaling"]
    ]
    limits = ", ".join(
        f"{_e(key)} {value:,}" for key, value in server["limits"].items() if value is not None
    )
    file = "server-timeline.png"
    data = server_timeline_png(timeline, list(run.steps), f"{run.name}: SGLang", offset)
    out.write(file, data)
    return (
        f'<h2>The server\'s side</h2><div class="table"><table>{head}{"".join(rows)}</table></div>'
        f'<p class="note">Binds first: {_e(server["headline"])}. Limits: {limits}.</p>'
        + _image(file, data, f"SGLang's running and queued requests and KV cache of {run.name}")
    )


def _document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _throughput(out: OutputFolder, sides: dict[str, list[dict]], alt: str) -> str:
    data = throughput_png(sides)
    out.write("throughput.png", data)
    return _image("throughput.png", data, alt)


def write_page(out: str | Path, name: str, title: str, body: str) -> Path:
    """Write one HTML page of this report's style (``body``: HTML, its text escaped by the
    caller) as ``name`` into ``out``; refuses symbolic links as write_report does."""
    with OutputFolder(out) as folder:
        return folder.write(name, _document(title, body).encode())


def escape(value: object) -> str:
    """Text for an HTML page of this style."""
    return _e(value)


def write_report(run: Run, out: str | Path) -> Path:
    """Write ``report.html`` and its PNGs into ``out`` (made if missing); its path.
    UnsafeOutputError (an OSError) for an output folder or file that is a symbolic link."""
    with OutputFolder(out) as folder:
        return _write_report(run, folder)


def _write_report(run: Run, out: OutputFolder) -> Path:
    if run.results["bench"]:
        chart = _throughput(
            out, {"A": run.results["bench"]}, f"output throughput and TPOT of {run.name}"
        )
        bench = f"<h2>Throughput and TPOT by concurrency</h2>{chart}{_bench_table(run)}"
    else:  # no empty charts: one line says why there are none
        bench = f"<h2>Benchmark</h2>{_no_bench(run.name)}"
    body = [
        f"<h1>Benchmark report: {_e(run.name)}</h1>",
        _settings(run),
        f'<section class="pair"><div>{bench}{_verdict_table(run)}</div>'
        f"{_findings(run, 'Findings')}</section>",
        "<h2>GPU timelines</h2>",
        '<p class="note">Shaded spans: the benchmark\'s steps (c = concurrency).</p>',
        _timelines(run, out, "", ""),
        _server(run, out),
    ]
    page = _document(f"Benchmark report: {run.name}", "\n".join(body))
    return out.write(PAGE, page.encode())


def _comparison_table(comparisons: list[Comparison]) -> str:
    head = (
        "<tr><th>concurrency</th><th>A tok/s (runs)</th><th>B tok/s (runs)</th><th>B vs A</th>"
        '<th>spread A</th><th>spread B</th><th class="text">verdict</th></tr>'
    )
    rows = [
        f"<tr><td>{c.concurrency}</td><td>{c.mean_a:.1f} ({c.runs_a})</td>"
        f"<td>{c.mean_b:.1f} ({c.runs_b})</td><td>{percent(c.difference_pct, True)}</td>"
        f"<td>±{percent(c.spread_a_pct)}</td><td>±{percent(c.spread_b_pct)}</td>"
        f'<td class="text">{_e(c.verdict)}</td></tr>'
        for c in comparisons
    ]
    return f'<div class="table"><table>{head}{"".join(rows)}</table></div>'


def write_ab_report(run_a: Run, run_b: Run, out: str | Path) -> Path:
    """Write an A/B ``report.html`` of two runs and its PNGs into ``out``; its path.
    UnsafeOutputError (an OSError) for an output folder or file that is a symbolic link."""
    with OutputFolder(out) as folder:
        return _write_ab_report(run_a, run_b, folder)


def _write_ab_report(run_a: Run, run_b: Run, out: OutputFolder) -> Path:
    bench_a, bench_b = run_a.results["bench"], run_b.results["bench"]
    comparisons = (
        compare(runs_by_concurrency([run_a.folder]), runs_by_concurrency([run_b.folder]))
        if bench_a and bench_b
        else []
    )
    sides = {side: rows for side, rows in (("A", bench_a), ("B", bench_b)) if rows}
    chart = (
        _throughput(out, sides, f"output throughput and TPOT, {' and '.join(sides)}")
        if sides
        else ""
    )
    chart += "".join(
        _no_bench(f"{side}, {r.name}")
        for side, r in (("A", run_a), ("B", run_b))
        if not r.results["bench"]
    )
    table = (
        _comparison_table(comparisons)
        if comparisons
        else '<p class="note">the two runs share no concurrency: no comparison</p>'
    )
    body = [
        f"<h1>A/B: {_e(run_a.name)} (A) against {_e(run_b.name)} (B)</h1>",
        f"<p>A: {_settings(run_a)}</p><p>B: {_settings(run_b)}</p>",
        f"<h2>Throughput and TPOT by concurrency</h2>{chart}{table}",
        f'<section class="pair">{_findings(run_a, "Findings, A")}'
        f"{_findings(run_b, 'Findings, B')}</section>",
        "<h2>GPU timelines, A</h2>",
        _timelines(run_a, out, "a-", "A: "),
        "<h2>GPU timelines, B</h2>",
        _timelines(run_b, out, "b-", "B: "),
    ]
    page = _document(f"A/B: {run_a.name} against {run_b.name}", "\n".join(body))
    return out.write(PAGE, page.encode())


def default_output(results_dir: str | Path, b_dir: str | Path | None) -> Path:
    """``RESULTS_DIR/report``, or ``RESULTS_DIR_B/ab-report`` for an A/B (beside ab.json)."""
    return Path(b_dir) / "ab-report" if b_dir else Path(results_dir) / "report"


def run(args: argparse.Namespace) -> int:
    out = args.output or default_output(args.results_dir, args.results_dir_b)
    try:
        first = read_run(args.results_dir)
        if args.results_dir_b:
            page = write_ab_report(first, read_run(args.results_dir_b), out)
        else:
            page = write_report(first, out)
    except (ResultsError, UnsafeOutputError, ValueError, KeyError, PyinfraError) as error:
        print(f"report: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"report: cannot write into {out}: {error}", file=sys.stderr)
        return 2
    print(page)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results_dir", metavar="RESULTS_DIR", help="a deploy/bench.py run folder (side A)"
    )
    parser.add_argument(
        "results_dir_b",
        metavar="RESULTS_DIR_B",
        nargs="?",
        default=None,
        help="a second run folder: an A/B page of the two",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder for report.html and its PNGs (default: RESULTS_DIR/report, or "
        "RESULTS_DIR_B/ab-report for an A/B)",
    )
