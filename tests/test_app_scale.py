"""Every page on a runs folder grown by months of use: 1,000 finished runs (copies of the sample
runs under new ids, no sweep records, made in a temp folder). Each page renders with no exception;
Compare's default selection holds at most 10 runs, and selecting a few hundred still renders, with
its small multiples capped and a message saying so."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lab.runfolder import REPO_ROOT
from lab.views import charts
from lab.views.compare.runs import DEFAULT_MAX
from tests.scale_fixtures import make_runs

N = 1000
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("scale") / "runs"
    root.mkdir()
    ids = make_runs(root, N)
    mp = pytest.MonkeyPatch()
    mp.setenv("LAB_RUNS_DIR", str(root))
    yield ids
    mp.undo()


def _page(page: str | None) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page).run()
    return at


@pytest.mark.parametrize("page", [None, "pages/2_Live.py", "pages/4_Logs.py"])
def test_every_page_renders_on_1000_runs(big, page):
    at = _page(page)
    assert not at.exception, at.exception


def test_compare_on_1000_runs_defaults_small_and_caps_a_large_selection(big):
    at = _page("pages/3_Compare.py")
    assert not at.exception, at.exception
    chosen = at.multiselect(key="cmp_runs").value
    assert 0 < len(chosen) <= DEFAULT_MAX
    assert len(at.warning) <= 1  # folded: one counting line
    many = big[:40]  # 40 panels would need 14 subplot rows
    at.multiselect(key="cmp_runs").set_value(many).run()
    assert not at.exception, at.exception
    assert any(charts.panels_note(40) in i.value for i in at.info)
    assert all(len(w.value) < 400 for w in at.warning)
