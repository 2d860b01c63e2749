"""Compare in a real browser (issue 20's done-when): ``streamlit run app.py`` with an empty private
runs folder, so Compare shows the shipped sample runs, in Debian's Chromium at 1400x1000. The first
viewport holds the mode cards with their intervals above any warning, and the throughput chart
draws its error bars (plotly's ``g.errorbar`` in the SVG); the newest sample sweep counts
devices, so its scaling chart follows, with a point and error bar per mode and count. Skipped
with the reason where /usr/bin/chromium is missing (conftest); the server and browser end with
the test.
"""

from __future__ import annotations

import re

import pytest

from lab.views.compare.scaling_chart import THROUGHPUT_CAPTION
from tests.e2e_helpers import REPO, chromium_page, streamlit_server, wait_ready

ARTIFACTS = REPO / "test-artifacts"
WIDTH, HEIGHT = 1400, 1000
SPEEDUP = re.compile(r"\d\.\d\d×")
INTERVAL = re.compile(r"\d\.\d\d–\d\.\d\d")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_compare_answers_first_and_its_bars_carry_intervals(tmp_path):
    from playwright.sync_api import expect

    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with streamlit_server(runs_dir, ARTIFACTS) as server, chromium_page(WIDTH, HEIGHT) as page:
        page.goto(f"{server.url}/Compare")
        wait_ready(page)
        cards = page.locator('[data-testid="stMetric"]')
        expect(cards.first).to_be_visible(timeout=60_000)
        wait_ready(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(ARTIFACTS / "compare-first-screen.png"))
        # every card in the first viewport, its value the speedup with its interval
        boxes = [cards.nth(i).bounding_box() for i in range(cards.count())]
        assert boxes and all(b["y"] + b["height"] <= HEIGHT for b in boxes), boxes
        values = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
        deltas = page.locator('[data-testid="stMetricDelta"]').all_inner_texts()
        assert len(values) == len(deltas) == len(boxes), (values, deltas)
        assert all(SPEEDUP.fullmatch(v.strip()) for v in values), values
        assert all(INTERVAL.search(d) for d in deltas), deltas
        # shown whole: no value or interval cut off by its card (an ellipsis)
        cut = page.evaluate(
            """() => [...document.querySelectorAll(
                '[data-testid^="stMetric"], [data-testid^="stMetric"] *')]
                .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
        )
        assert cut == [], cut
        # above any warning
        bottom = max(b["y"] + b["height"] for b in boxes)
        alerts = page.locator('[data-testid="stAlert"]')
        tops = [alerts.nth(i).bounding_box()["y"] for i in range(alerts.count())]
        assert all(top >= bottom for top in tops), (bottom, tops)
        # the throughput chart: one bar per mode, each with its error bar
        chart = page.locator('[data-testid="stPlotlyChart"]', has_text="throughput (samples/s")
        chart.scroll_into_view_if_needed()
        bars = chart.locator("g.errorbar")
        expect(bars.first).to_be_attached(timeout=30_000)
        assert bars.count() >= 3
        assert chart.locator("g.errorbar path").count() >= 3
        chart.screenshot(path=str(ARTIFACTS / "compare-throughput.png"))
        # the newest sample sweep is the device-count one: its scaling chart, a point per mode and
        # count (single x1, ddp x1, ddp x2) each with its error bar
        expect(page.get_by_text(THROUGHPUT_CAPTION, exact=True)).to_be_visible(timeout=30_000)
        scaling = page.locator('[data-testid="stPlotlyChart"]', has_text="DDP processes on the CPU")
        scaling.scroll_into_view_if_needed()
        expect(scaling.locator("g.errorbar").first).to_be_attached(timeout=30_000)
        assert scaling.locator("g.errorbar").count() >= 3
        scaling.screenshot(path=str(ARTIFACTS / "compare-scaling.png"))
    assert "Traceback" not in server.log.read_text()
