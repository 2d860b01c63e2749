"""ui.shared: one cached event reader per folder for every page, and the pages keep no reader of
their own.

The reader cache is exercised outside a Streamlit server (``st.cache_resource``
falls back to an in-memory cache there, as it is in the app); the pages are
checked with ``ast``: none calls ``st.cache_resource`` or builds a
``LogdirReader`` itself, and the pages that read event files take the shared one.
"""

from __future__ import annotations

import ast

import pytest

from lab.events import LogdirReader
from lab.runfolder import REPO_ROOT, SAMPLE_RUNS
from ui import shared

PAGES = sorted((REPO_ROOT / "pages").glob("*.py")) + [REPO_ROOT / "app.py"]


def test_one_reader_per_folder_shared_by_every_caller(tmp_path):
    shared.event_reader.clear()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first = shared.event_reader(str(a))
    assert isinstance(first, LogdirReader)
    # the Live page and the Compare page get the same one
    assert shared.event_reader(str(a)) is first
    assert shared.event_reader(str(b)) is not first


def test_the_shared_reader_reads_the_sample_runs():
    runs = sorted(d for d in SAMPLE_RUNS.iterdir() if (d / "tb").is_dir())
    assert runs, f"{SAMPLE_RUNS} holds no recorded runs: the project ships them"
    shared.event_reader.clear()  # a reader refreshed by an earlier test would have nothing new
    reader = shared.event_reader(str(runs[0]))
    assert reader.refresh() > 0 and {"sys", "tb"} <= set(reader.run_names())


def _calls(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_keep_no_reader_of_their_own(page):
    names = _calls(page)
    assert "cache_resource" not in names and "LogdirReader" not in names, (
        f"{page.name} caches or builds an event reader itself: use ui.shared.event_reader"
    )


def test_the_pages_that_read_events_use_the_shared_reader():
    users = {p.name for p in PAGES if {"event_reader", "log_folder"} & _calls(p)}
    assert users == {"2_Live.py", "3_Compare.py", "4_Logs.py"}
