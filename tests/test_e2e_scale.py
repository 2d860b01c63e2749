"""Every page in a real browser on a runs folder grown by months of use (issue 20's done-when):
1,000 finished runs, copies of the shipped sample runs under new ids made in a temp folder once for
the module (tests/scale_fixtures.py), served by ``streamlit run app.py`` and opened in Debian's
Chromium. Home, Live, Compare and Logs each draw their title with no exception; Compare's default
selection holds at most 10 runs, and "Select all matching" (every run) still draws, its small
multiples capped with the message saying so."""

from __future__ import annotations

import re

import pytest

from lab.views import charts
from lab.views.compare.runs import DEFAULT_MAX
from tests.e2e_helpers import REPO, chromium_page, streamlit_server, wait_ready
from tests.scale_fixtures import make_runs

N = 1000
ARTIFACTS = REPO / "test-artifacts"
PAGES = [("/", "Parallel Training Lab"), ("/Live", "Live"), ("/Compare", "Compare runs")]
PAGES.append(("/Logs", "Logs"))
CHOSEN = re.compile(r"· (\d+) chosen")

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale") / "runs"
    root.mkdir()
    make_runs(root, N)
    with streamlit_server(root, ARTIFACTS / "scale") as server, chromium_page() as page:
        yield server, page


def _open(page, url: str, title: str) -> None:
    page.goto(url)
    page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=120_000)
    wait_ready(page, timeout_ms=120_000)


@pytest.mark.parametrize("path,title", PAGES, ids=[t for _, t in PAGES])
def test_every_page_draws_on_1000_runs(app, path, title):
    server, page = app
    _open(page, server.url + path, title)
    assert page.locator('[data-testid="stException"]').count() == 0


def test_compare_defaults_small_and_draws_every_run_capped(app):
    from playwright.sync_api import expect

    server, page = app
    _open(page, f"{server.url}/Compare", "Compare runs")
    line = page.get_by_text(CHOSEN).first
    expect(line).to_be_visible()
    chosen = int(CHOSEN.search(line.inner_text()).group(1))
    assert 0 < chosen <= DEFAULT_MAX
    page.get_by_role("button", name="Select all matching").click()
    # every run chosen: a count of four digits or more
    expect(page.get_by_text(re.compile(r"· \d{4,} chosen")).first).to_be_visible(timeout=120_000)
    wait_ready(page, timeout_ms=300_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    total = int(CHOSEN.search(page.get_by_text(CHOSEN).first.inner_text()).group(1))
    assert total >= N
    expect(page.get_by_text(charts.panels_note(total)).first).to_be_attached(timeout=60_000)
