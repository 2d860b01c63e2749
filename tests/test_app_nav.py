"""The sidebar (issue 35): ``app.py`` is the entry point and lists Home, Launch, Live, Compare,
Logs in that order, each titled and with an icon, at the URLs the pages always had."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lab.runfolder import REPO_ROOT


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUNS_DIR", str(tmp_path))
    monkeypatch.delenv("LAB_PASSWORD_HASH", raising=False)
    return tmp_path


def test_the_sidebar_reads_home_launch_live_compare_logs(runs_dir):
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30).run()
    assert not at.exception, at.exception
    pages = list(at._registered_pages.values())  # what the sidebar lists, in order
    assert [p["page_name"] for p in pages] == ["Home", "Launch", "Live", "Compare", "Logs"]
    assert [p["url_pathname"] for p in pages] == ["", "Launch", "Live", "Compare", "Logs"]
    assert all(p["icon"] for p in pages)
    assert at.title[0].value == "Parallel Training Lab"  # Home opens first
    at.switch_page("pages/4_Logs.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value != "Parallel Training Lab"


@pytest.mark.e2e
def test_the_browser_sidebar_reads_the_page_titles_and_its_links_open_them(tmp_path):
    from tests.e2e_helpers import chromium_page, streamlit_server, wait_ready

    root = tmp_path / "runs"
    root.mkdir()
    with streamlit_server(root, tmp_path / "log") as server, chromium_page() as page:
        page.goto(server.url)
        page.get_by_role("heading", name="Parallel Training Lab", exact=True).wait_for(
            timeout=120_000
        )
        nav = page.locator('[data-testid="stSidebarNav"] a')
        nav.first.wait_for(timeout=30_000)
        texts = [t.strip() for t in nav.all_inner_texts()]
        assert [t.split("\n")[-1] for t in texts] == ["Home", "Launch", "Live", "Compare", "Logs"]
        page.locator('[data-testid="stSidebarNav"] a', has_text="Logs").click()
        page.get_by_role("heading", name="Logs", exact=True).first.wait_for(timeout=120_000)
        wait_ready(page, timeout_ms=120_000)
        assert page.url.rstrip("/").endswith("/Logs")
