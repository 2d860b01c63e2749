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
