"""The report page rendered by a real headless Chromium (Debian's package): the charts are
drawn (the screenshot holds their lines' colours, and is not one colour), the DOM holds every
chart, and the page logs nothing to the console. A broken page fails the same checks.

Skips only where Chromium cannot be installed (not root, or no apt); where it could be, a
missing Chromium fails: scripts/bootstrap-tests.sh installs it."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from PIL import Image

from pyinfra_sglang.report.page import read_run, write_ab_report, write_report
from tests.browser.chromium import find_chromium, render, why_not_installable
from tests.report_runs import h200_sampler_run, host_run

WIDTH = 1400
# matplotlib's first two line colours (tab:blue, tab:orange): only the charts draw them.
CHART_COLOURS = {"blue": (31, 119, 180), "orange": (255, 127, 14)}
# A drawn timeline has thousands of such pixels at this size; a missing image has none.
MIN_CHART_PIXELS = 1000


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        reason = why_not_installable()
        if reason:
            pytest.skip(reason)
        pytest.fail("Chromium is not installed but could be: run scripts/bootstrap-tests.sh")
    return binary


def colour_counts(image: Image.Image) -> Counter:
    return Counter({rgb: n for n, rgb in image.convert("RGB").getcolors(maxcolors=1 << 24)})


def chart_pixels(image: Image.Image) -> dict[str, int]:
    counts = colour_counts(image)
    return {
        name: sum(
            n for rgb, n in counts.items() if all(abs(a - b) <= 8 for a, b in zip(rgb, colour))
        )
        for name, colour in CHART_COLOURS.items()
    }


def check_rendered(rendered, images: int, title: str) -> None:
    assert rendered.console == [], rendered.console
    assert len(re.findall(r'<img src="data:image/png;base64,', rendered.dom)) == images
    assert title in rendered.dom
    image = Image.open(rendered.screenshot)
    assert image.size[0] == WIDTH
    colours = colour_counts(image)
    (_, most), total = colours.most_common(1)[0], image.size[0] * image.size[1]
    assert most / total < 0.9 and len(colours) > 200, "the screenshot is (nearly) blank"
    found = chart_pixels(image)
    assert all(n >= MIN_CHART_PIXELS for n in found.values()), found


def test_report_renders_with_its_charts_and_no_console_errors(chromium, tmp_path):
    page = write_report(read_run(h200_sampler_run(tmp_path)), tmp_path / "out")
    rendered = render(chromium, page, tmp_path / "shot.png", WIDTH, 4200)
    check_rendered(rendered, 3, "Benchmark report: h200-vm / 20261130T191005Z")


def test_ab_report_renders(chromium, tmp_path):
    a, b = host_run(tmp_path, 1, "host-a"), host_run(tmp_path, 2, "host-b")
    page = write_ab_report(read_run(a), read_run(b), tmp_path / "out")
    rendered = render(chromium, page, tmp_path / "shot.png", WIDTH, 4200)
    check_rendered(rendered, 5, "A/B: host-a / 20261201T085652Z (A)")


def test_a_broken_page_fails_these_checks(chromium, tmp_path):
    """The checks can fail: charts that do not load, and a script error, are both seen."""
    page = write_report(read_run(h200_sampler_run(tmp_path)), tmp_path / "out")
    broken = re.sub(r'src="data:image/png;base64,[^"]+"', 'src="missing.png"', page.read_text())
    broken = broken.replace("</body>", "<script>undefinedFunction()</script></body>")
    page.write_text(broken)
    rendered = render(chromium, page, tmp_path / "shot.png", WIDTH, 4200)
    assert any("undefinedFunction is not defined" in line for line in rendered.console)
    assert all(n < MIN_CHART_PIXELS for n in chart_pixels(Image.open(rendered.screenshot)).values())


# Injected into a copy of the page (the report itself has no script): the boxes of its charts,
# tables and findings, as laid out, and whether the document is wider than the window; the
# answer is written into the DOM, which --dump-dom prints after load.
LAYOUT_PROBE = """<script>
addEventListener("load", () => {
  // A table as laid out: its scrolling box where it has one, else the table itself.
  const shown = [...document.querySelectorAll("figure, table, ul.findings, p.note")]
    .map((e) => (e.tagName === "TABLE" && e.closest(".table")) || e);
  const boxes = [...new Set(shown)].map((e) => e.getBoundingClientRect())
    .filter((r) => r.width > 0 && r.height > 0);
  const overlaps = [];
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b, j) => {
    const apart = a.right - 1 <= b.left || b.right - 1 <= a.left
      || a.bottom - 1 <= b.top || b.bottom - 1 <= a.top;
    if (!apart) overlaps.push(i + "x" + (i + 1 + j));
  }));
  const wide = document.documentElement.scrollWidth - document.documentElement.clientWidth;
  document.body.setAttribute("data-layout", boxes.length + ";" + overlaps.join(",") + ";" + wide);
});
</script>"""


def layout(chromium: str, page, tmp_path, width: int) -> tuple[int, list[str], int]:
    """(boxes, overlapping pairs, pixels the document scrolls sideways) of ``page`` at
    ``width``."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    rendered = render(chromium, probe, tmp_path / f"shot-{width}.png", width, 3000)
    found = re.search(r'data-layout="(\d+);([\dx,]*);(-?\d+)"', rendered.dom)
    assert found, rendered.stderr[-2000:]
    boxes, overlaps, wide = found.groups()
    return int(boxes), [o for o in overlaps.split(",") if o], int(wide)


@pytest.mark.parametrize("width", [900, 1400])
def test_at_900_px_no_two_boxes_overlap_and_nothing_scrolls_sideways(chromium, tmp_path, width):
    """Before: at 900 px the benchmark table ran under the findings beside it."""
    run = read_run(h200_sampler_run(tmp_path))
    page = write_report(run, tmp_path / "out")
    boxes, overlaps, wide = layout(chromium, page, tmp_path, width)
    assert boxes >= 5, boxes  # charts, the table, the findings: the probe saw them
    assert overlaps == [] and wide <= 0, (overlaps, wide)
