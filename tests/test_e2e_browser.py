"""The real app in a real browser: ``streamlit run app.py`` on a free port
with a private runs folder, driven by Debian's Chromium through Playwright.

Scenario: the home page; Compare on the shipped sample runs (table and
charts); Logs on sample_data/runs; a 2-rank DDP run launched from the Launch
page and watched on the Live page until it has ``succeeded`` with its loss
chart drawn; then the user-style examples/dp_digits.py launched as "My
script" (in a private working directory) and watched the same way, its loss
read from the folder its own ``SummaryWriter()`` chose. Then the Logs page on
a generated folder of 300 runs: a run regex, "Select all matching", and the
charts drawing exactly those runs. Screenshots of each page go to test-artifacts/ (gitignored);
no tracked file is written (the README's pictures are refreshed by hand with
scripts/refresh_screenshots.py). Nothing of the server or the run may be
left running afterwards.
"""

from __future__ import annotations

import re
import time

import psutil
import pytest

from tests.e2e_helpers import (
    REPO,
    chromium_page,
    processes_mentioning,
    streamlit_server,
    wait_ready,
)
from tests.logs_fixtures import make_experiments, run_names

ARTIFACTS = REPO / "test-artifacts"
SAMPLES = REPO / "sample_data" / "runs"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _open(page, url: str, artifacts, name: str | None = None) -> None:
    page.goto(url)
    wait_ready(page)
    if name:
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def _no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator(
        '[data-testid="stException"]'
    ).first.inner_text()


def _charts_drawn(page, at_least: int = 1, timeout_ms: int = 30_000) -> None:
    from playwright.sync_api import expect

    svgs = page.locator('[data-testid="stPlotlyChart"] .main-svg')
    expect(svgs.nth(at_least - 1)).to_be_attached(timeout=timeout_ms)


def _wait_gone(runs_dir, timeout_s: float = 20) -> list:
    deadline = time.monotonic() + timeout_s
    left = processes_mentioning(str(runs_dir))
    while left and time.monotonic() < deadline:
        psutil.wait_procs(left, timeout=1)
        left = processes_mentioning(str(runs_dir))
    return left


@pytest.fixture
def server(tmp_path):
    """The app with an empty private runs folder; ended (SIGTERM, then SIGKILL) and checked at
    teardown."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    ARTIFACTS.mkdir(exist_ok=True)
    with streamlit_server(runs_dir, ARTIFACTS) as s:
        yield s
    assert "Traceback" not in s.log.read_text()
    assert not _wait_gone(runs_dir), "processes of a run were left behind"


@pytest.fixture
def browser_page():
    with chromium_page(1400, 1000) as page:
        yield page


def test_launch_watch_compare_browse(server, browser_page):
    from playwright.sync_api import expect

    page, runs_dir = browser_page, server.runs_dir
    # The shipped sample runs are what Compare and Logs show on a fresh clone: missing is a defect.
    assert any(SAMPLES.glob("*/summary.json")), (
        f"{SAMPLES} lost its recorded runs: scripts/record_sample_runs.py"
    )
    # Home: the device strip (CPU here) and the empty runs folder.
    _open(page, server.url, ARTIFACTS, "home")
    expect(page.get_by_text("Parallel Training Lab").first).to_be_visible()
    expect(page.get_by_text("No runs yet")).to_be_visible()
    _no_exception(page)

    # Compare on the sample runs: the table and the charts.
    page.set_viewport_size({"width": 1400, "height": 1700})
    _open(page, f"{server.url}/Compare", ARTIFACTS)
    expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible(timeout=30_000)
    _charts_drawn(page, at_least=2)
    _no_exception(page)
    page.screenshot(path=str(ARTIFACTS / "compare.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})

    # Logs on sample_data/runs: several runs overlaid, one chart per tag.
    _open(page, f"{server.url}/Logs", ARTIFACTS)
    page.locator('[data-testid="stRadio"] label', has_text="sample runs").click()
    expect(page.get_by_text(re.compile(r"Reading `?.*sample_data/runs"))).to_be_visible()
    _charts_drawn(page, at_least=2)
    _no_exception(page)
    page.screenshot(path=str(ARTIFACTS / "logs.png"), full_page=True)

    # Launch a tiny 2-rank DDP run.
    _open(page, f"{server.url}/Launch", ARTIFACTS)
    page.locator('[data-testid="stRadio"] label', has_text="ddp —").click()
    code = page.locator('[data-testid="stCode"]').first
    expect(code).to_contain_text("torch.distributed.run", timeout=20_000)
    expect(code).to_contain_text("--nproc-per-node 2")
    epochs = page.get_by_label("Epochs", exact=True)
    epochs.fill("2")
    epochs.press("Enter")
    expect(code).to_contain_text("--epochs 2", timeout=20_000)
    wait_ready(page)
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_text("Launched")).to_be_visible(timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "launch.png"), full_page=True)
    run_ids = [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")]
    assert len(run_ids) == 1

    # Live: the run reaches succeeded and its loss chart is drawn.
    page.get_by_text("Watch it live").click()
    expect(page).to_have_url(re.compile(rf"/Live\?run={re.escape(run_ids[0])}"), timeout=20_000)
    expect(page.get_by_role("heading", name="succeeded")).to_be_visible(timeout=150_000)
    loss = page.locator('[data-testid="stPlotlyChart"]', has_text="Loss")
    expect(loss.locator(".main-svg").first).to_be_attached(timeout=20_000)
    # The run's end reruns the whole page from inside the fragment; until that run is over, the
    # fragment's last drawing may still stand beside the new one, so the tabs are counted after it.
    wait_ready(page)
    rank_tab = page.get_by_role("tab", name="rank 1", exact=True)
    expect(rank_tab).to_have_count(1)  # per-rank log tabs of DDP, drawn once
    expect(rank_tab).to_be_visible()
    _no_exception(page)
    page.screenshot(path=str(ARTIFACTS / "live.png"), full_page=True)

    # My script: the user-style example, unchanged, in a working directory of its own.
    work = runs_dir.parent / "script-work"
    work.mkdir()
    _open(page, f"{server.url}/Launch", ARTIFACTS)
    page.locator('[data-testid="stRadio"] label', has_text="My script").click()
    for label, value in (
        ("Script: a .py file, or -m package.module", str(REPO / "examples" / "dp_digits.py")),
        ("Its arguments", "--epochs 1 --max-steps 5 --log-every 1"),
        ("Working directory (empty: the script's folder)", str(work)),
    ):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        wait_ready(page)
    code = page.locator('[data-testid="stCode"]').first
    expect(code).to_contain_text("examples/dp_digits.py", timeout=20_000)
    expect(code).to_contain_text("--max-steps 5")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_text("Launched")).to_be_visible(timeout=30_000)
    script_run = [
        p.name for p in runs_dir.iterdir() if not p.name.startswith(".") and p.name not in run_ids
    ]
    assert len(script_run) == 1
    page.get_by_text("Watch it live").click()
    expect(page).to_have_url(re.compile(rf"/Live\?run={re.escape(script_run[0])}"), timeout=20_000)
    expect(page.get_by_role("heading", name="succeeded")).to_be_visible(timeout=120_000)
    loss = page.locator('[data-testid="stPlotlyChart"]', has_text="Loss")
    expect(loss.locator(".main-svg").first).to_be_attached(timeout=20_000)
    # where SummaryWriter() put them, linked
    assert list((work / "runs").glob("*/events.out.tfevents.*"))
    _no_exception(page)


def test_logs_filters_300_runs_by_regex(server, browser_page, tmp_path):
    from playwright.sync_api import expect

    page = browser_page
    root = tmp_path / "experiments"
    make_experiments(root, experiments=10, points=50, hparams=True)
    _open(page, f"{server.url}/Logs", ARTIFACTS)
    page.locator('[data-testid="stRadio"] label', has_text="a folder I type").click()
    wait_ready(page)
    path = page.get_by_label("Path of a folder with event files (searched recursively)")
    path.fill(str(root))
    path.press("Enter")
    # the sample runs' charts are on the page already: wait for the typed folder's own line
    expect(page.get_by_text("300 runs · 6 selected, 6 drawn")).to_be_visible(timeout=60_000)
    _charts_drawn(page, at_least=2)
    regex = page.get_by_label("Filter runs (regex)")
    regex.fill(r"^exp3/lr0\.1-")
    regex.press("Enter")
    expect(page.get_by_text("10 of 300 runs match the filter · 6 selected, 0 drawn")).to_be_visible(
        timeout=30_000
    )
    wait_ready(page)
    page.get_by_role("button", name="Select all matching").click()
    expect(
        page.get_by_text("10 of 300 runs match the filter · 10 selected, 10 drawn")
    ).to_be_visible(timeout=30_000)
    _charts_drawn(page, at_least=2)
    wait_ready(page)
    _no_exception(page)
    # What plotly drew in the browser: every chart holds exactly the 10 matching runs.
    drawn = page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')].map(g => g.data.map(t => t.name))"
    )
    expected = {n for n in run_names(10) if n.startswith("exp3/lr0.1-")}
    assert len(drawn) >= 2 and all(set(names) == expected for names in drawn), drawn
    page.screenshot(path=str(ARTIFACTS / "logs-regex.png"), full_page=True)
