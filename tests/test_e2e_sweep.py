"""The scaling study from the Launch page, in a real browser (issue 21's done-when): the form set
to a model that is not the default, "Compare modes of this config" over device counts 1 and 2
starts one sweep whose runs carry that model, and Compare draws its scaling view. Debian's
Chromium; skipped with the reason where /usr/bin/chromium is missing (conftest). The server, the
browser and the runs end with the test."""

from __future__ import annotations

import json

import pytest

from lab.engine.launch import launcher
from lab.engine.registry import list_runs
from tests.e2e_helpers import REPO, chromium_page, streamlit_server, wait_ready

ARTIFACTS = REPO / "test-artifacts"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _number(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    wait_ready(page)


def _pick(page, label: str, option: str, search: bool = False):
    """Pick ``option`` in the selectbox or multiselect labelled ``label`` (typing it first when
    ``search``: a long list draws only what is near); the widget. A rerun that redraws the open
    list detaches its options: then the list is opened again (three tries)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    widget = page.locator('[data-testid="stSelectbox"], [data-testid="stMultiSelect"]').filter(
        has_text=label
    )
    for attempt in range(3):
        wait_ready(page)
        widget.first.locator("input").click()  # the box itself, not the label
        if search:
            page.keyboard.type(option)
        try:
            page.get_by_role("option", name=option, exact=True).first.click(timeout=10_000)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
            if attempt == 2:
                raise
    page.keyboard.press("Escape")
    return widget.first


def test_launch_compares_the_forms_model_over_device_counts_and_compare_draws_it(tmp_path):
    from playwright.sync_api import expect

    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with streamlit_server(runs_dir, ARTIFACTS) as server, chromium_page(1400, 2400) as page:
        page.goto(f"{server.url}/Launch")
        wait_ready(page)
        _pick(page, "Model", "squeezenet1_1", search=True)  # a cheap model, not the default
        code = page.locator('[data-testid="stCode"]').first
        expect(code).to_contain_text("--model squeezenet1_1", timeout=30_000)  # the form's config
        _number(page, "Max steps (0 = no limit)", "3")
        _number(page, "Global batch", "32")
        expect(code).to_contain_text("--batch-size 32", timeout=30_000)
        page.locator('[data-testid="stExpander"]').filter(
            has_text="Compare modes of this config"
        ).locator("summary").click()
        counts = _pick(page, "Device counts", "1")  # with the default (2): counts 1 and 2
        expect(counts).to_contain_text("1")
        expect(counts).to_contain_text("2")
        wait_ready(page)
        page.locator('[data-testid="stButton"] button').filter(
            has_text="Compare modes of this config"
        ).click()
        expect(page.get_by_text("started:")).to_be_visible(timeout=60_000)
        runs = list_runs(runs_dir)
        configs = [json.loads((runs_dir / r.run_id / "run.json").read_text()) for r in runs]
        assert {c["config"]["model"] for c in configs} == {"squeezenet1_1"}, configs
        asked = sorted((c["config"]["mode"], c["config"]["nproc"]) for c in configs)
        assert ("ddp", 1) in asked and ("ddp", 2) in asked, asked
        for r in runs:
            assert launcher.wait(r.run_id, runs_dir, 300) == "succeeded", r.run_id
        page.goto(f"{server.url}/Compare")  # it opens on the newest sweep
        wait_ready(page)
        expect(page.get_by_text("Throughput against device count")).to_be_visible(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(ARTIFACTS / "compare-scaling.png"), full_page=True)
