"""The report's charts and page, read from their matplotlib Axes and HTML, on real captures
(tests/fixtures/sglang-0.5.17-h200: SGLang 0.5.17 on one H200, CUDA graphs on): room above
the highest point, utilization on 0-100%, PCIe up to the link's rate, p99 beside the median,
and no empty charts for a run without benchmark results."""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib
import pytest
from matplotlib.figure import Figure

from pyinfra_sglang.diagnosis.diagnose import load_results
from pyinfra_sglang.report.charts import STYLE, throughput_axes, timeline_axes
from pyinfra_sglang.report.page import read_run, write_ab_report, write_report
from tests.report_runs import host_run

GRAPHS_ON = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200" / "graphs-on"


@pytest.fixture(scope="module")
def results() -> dict:
    return load_results(GRAPHS_ON)


def _figure() -> Figure:
    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(10, 9))


def test_the_tpot_and_throughput_axes_have_room_above_their_highest_point(results):
    axes = throughput_axes(_figure(), {"A": results["bench"]})
    for ax, fields in zip(axes, (["output_throughput"], ["median_tpot_ms", "p99_tpot_ms"])):
        highest = max(row[f] for row in results["bench"] for f in fields)
        bottom, top = ax.get_ylim()
        # Before: matplotlib's default margin put the top of the TPOT axis on its highest point.
        assert bottom == 0 and top >= highest * 1.1, (fields, top, highest)


def test_the_tpot_chart_shows_p99_beside_the_median(results):
    _, tpot = throughput_axes(_figure(), {"A": results["bench"]})
    lines = {line.get_label(): line for line in tpot.get_lines()}
    assert set(lines) == {"median", "p99"}  # legend entries: the median line, the p99 line
    assert lines["p99"].get_linestyle() == "--"
    p99_means = lines["p99"].get_ydata()
    median_means = lines["median"].get_ydata()
    assert all(p > m for p, m in zip(p99_means, median_means))


def test_utilization_is_0_to_100_and_an_idle_pcie_link_looks_idle(results):
    # The first 14 s of the run: the server idles (GPU util 0, PCIe a few MB/s).
    idle = [s for s in results["samples"] if s["t"] < 14]
    assert max(g["gpu_util"] for s in idle for g in s["gpus"]) == 0
    utilization, pcie, nvlink, *_ = timeline_axes(_figure(), idle, 0, [], "idle", {"pcie": 63.0})
    # Before: auto-scaled to 0-0.04%, and PCIe to its few MB/s, both filling the panel.
    assert utilization.get_ylim() == (0, 100)
    assert pcie.get_ylim() == (0, 63.0)
    assert nvlink.get_ylim()[1] >= 1.0  # not sampled: a floor, not 0-0.06
    # A link of unknown rate: at least the floor of data/report.toml.
    assert timeline_axes(_figure(), idle, 0, [], "idle")[1].get_ylim()[1] == 1.0


def test_the_page_gives_timelines_the_links_rate_and_shows_p99_columns(tmp_path):
    folder = tmp_path / "h200" / "20261201T000000Z"
    shutil.copytree(GRAPHS_ON, folder)
    page = write_report(read_run(folder), tmp_path / "out").read_text()
    assert "<th>p99 TTFT ms</th>" in page and "<th>p99 TPOT ms</th>" in page
    # The run's first row: p99 TTFT 40.09 ms, p99 TPOT 5.00 ms (bench_serving's own numbers).
    assert "<td>40.1</td>" in page and "<td>5.0</td>" in page


def test_a_run_without_benchmark_results_has_no_empty_charts(tmp_path):
    folder = host_run(tmp_path)
    (folder / "bench.jsonl").unlink()
    out = tmp_path / "out"
    page = write_report(read_run(folder), out).read_text()
    # Before: a throughput chart of two empty panels, and a table note.
    assert not (out / "throughput.png").exists() and 'href="throughput.png"' not in page
    assert page.count("has no benchmark results") == 1
    assert page.count("<img ") == 2  # the two GPUs' timelines only
    # An A/B of two such runs: no chart either; one line per side.
    other = host_run(tmp_path, 2, "other")
    (other / "bench.jsonl").write_text("")
    ab = write_ab_report(read_run(folder), read_run(other), tmp_path / "ab").read_text()
    assert not (tmp_path / "ab" / "throughput.png").exists()
    assert ab.count("has no benchmark results") == 2


def test_many_steps_are_shaded_but_not_labelled(results):
    from pyinfra_sglang.diagnosis.steps import Step

    steps = [Step(f"c={n}", n * 0.5, n * 0.5 + 0.4) for n in range(100)]
    axes = timeline_axes(_figure(), results["samples"], 0, steps, "many")
    assert (
        len(axes[0].texts) == 0 and axes[0].get_title(loc="left") == "100 steps: too many to label"
    )
    few = timeline_axes(_figure(), results["samples"], 0, steps[:3], "few")
    assert [t.get_text() for t in few[0].texts] == ["c=0", "c=1", "c=2"]
