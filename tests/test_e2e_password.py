"""A lab on a shared server, in a real browser (issue 24's done-when): ``streamlit run app.py
--server.address 0.0.0.0`` with ``LAB_PASSWORD_HASH`` set shows only a password field until the
right password is typed; a wrong one shows nothing of the runs; after signing in, Launch starts a
run (a listening address beyond loopback is allowed to launch once a password guards it). Debian's
Chromium; skipped with the reason where /usr/bin/chromium is missing (conftest). The server, the
browser and the run end with the test."""

from __future__ import annotations

import pytest

from lab.engine.launch import launcher
from lab.engine.launch.password import make_hash
from lab.engine.registry import list_runs
from tests.e2e_helpers import REPO, chromium_page, streamlit_server, wait_ready

ARTIFACTS = REPO / "test-artifacts"
SECRET = "correct horse battery"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _sign_in(page, password: str) -> None:
    field = page.locator('input[type="password"]')
    field.fill(password)
    page.get_by_role("button", name="Sign in").click()
    wait_ready(page)


def test_a_password_guards_every_page_and_then_launch_works(tmp_path):
    from playwright.sync_api import expect

    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    env = {"LAB_PASSWORD_HASH": make_hash(SECRET)}
    with (
        streamlit_server(runs_dir, ARTIFACTS, address="0.0.0.0", env=env) as server,
        chromium_page() as page,
    ):
        page.goto(f"{server.url}/Compare")
        wait_ready(page)
        expect(page.locator('input[type="password"]')).to_be_visible(timeout=30_000)
        body = page.locator("body")
        # nothing of the runs: the sample runs Compare shows after signing in are not there
        for hidden in ("sample", "Baseline", "Runs"):
            expect(body).not_to_contain_text(hidden)
        _sign_in(page, "not the password")
        expect(page.get_by_text("Wrong password.")).to_be_visible()
        expect(body).not_to_contain_text("sample")
        assert page.locator('[data-testid="stMetric"]').count() == 0

        page.goto(f"{server.url}/Launch")  # a new session: asked again
        wait_ready(page)
        _sign_in(page, SECRET)
        expect(page.get_by_text("Launch a run")).to_be_visible(timeout=30_000)
        expect(body).not_to_contain_text("Launching from the page is off")
        # the form below the title: the page's first run in this server (the model list, the
        # devices, the estimate) took over 30 s once beside a busy worker
        launch = page.get_by_role("button", name="Launch", exact=True)
        expect(launch).to_be_visible(timeout=90_000)
        wait_ready(page)
        launch.click()
        expect(page.get_by_text("Launched")).to_be_visible(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        runs = list_runs(runs_dir)
        assert len(runs) == 1, runs
        launcher.stop(runs[0].run_id, runs_dir)  # the quick run is not the point: end it here
        assert list_runs(runs_dir)[0].state in ("stopped", "succeeded")
