"""AppTest of the home, Launch, Live and Logs pages on a "fresh clone": the
runs folder (LAB_RUNS_DIR) is an empty tmp folder, so the pages fall back to
the shipped sample runs, and this machine has no GPU. Pages are reached the
way a user reaches them: from app.py, then switch_page."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_data" / "runs"


def _texts(at: AppTest, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def _app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page)
        at.run()
    return at


def test_home_loads_with_cpu_strip_and_empty_runs(runs_dir):
    at = _app()
    assert at.title[0].value == "Parallel Training Lab"
    assert any("No runs yet" in t for t in _texts(at, "info"))
    assert any(str(runs_dir) in c for c in _texts(at, "caption"))  # where runs live
    assert any(b.label == "Compare modes" for b in at.button)
    assert len(at.get("progress")) >= 2  # the device strip: utilisation and memory bars
    assert not list(runs_dir.iterdir())


@pytest.mark.parametrize("page", ["pages/1_Launch.py", "pages/2_Live.py", "pages/3_Compare.py", "pages/4_Logs.py"])
def test_every_page_loads_on_a_fresh_clone(runs_dir, page):
    if not (REPO / page).exists():
        pytest.skip(f"{page} is not there yet")
    at = _app(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert not list(runs_dir.iterdir())  # loading a page starts nothing


def test_launch_shows_command_and_cpu_note(runs_dir):
    at = _app("pages/1_Launch.py")
    assert any("runs use the CPU" in t for t in _texts(at, "info"))
    code = "\n".join(c.value for c in at.code)
    assert "training.train" in code and "--epochs 10" in code and "CUDA_VISIBLE_DEVICES=''" in code


def test_launch_refuses_batch_zero_and_starts_nothing(runs_dir):
    at = _app("pages/1_Launch.py")
    at.number_input(key="launch_batch").set_value(0)
    at.run()
    at.button(key="launch_go").click()
    at.run()
    assert not at.exception
    errors = _texts(at, "error")
    assert any("batch size 0 is not a positive whole number" in e for e in errors), errors
    assert any("Not launched" in e for e in errors)
    assert not at.success
    assert not list(runs_dir.iterdir())


def test_launch_refuses_batch_that_does_not_split(runs_dir):
    at = _app("pages/1_Launch.py")
    at.radio(key="launch_mode").set_value("ddp")
    at.run()
    at.number_input(key="launch_nproc").set_value(3)
    at.run()
    at.button(key="launch_go").click()
    at.run()
    errors = _texts(at, "error")
    assert any("batch 64 does not split over 3 processes: use 63 or 66" in e for e in errors), errors
    assert not list(runs_dir.iterdir())


def test_logs_typed_path_that_does_not_exist(runs_dir, tmp_path):
    at = _app("pages/4_Logs.py")
    at.radio(key="logs_source").set_value("a folder I type")
    at.run()
    at.text_input(key="logs_path").set_value(str(tmp_path / "no" / "such" / "dir"))
    at.run()
    assert not at.exception
    errors = _texts(at, "error")
    assert len(errors) == 1 and "does not exist" in errors[0]


def test_logs_bad_regex_is_a_message(runs_dir):
    if not SAMPLES.is_dir():
        pytest.skip("sample runs not recorded yet")
    at = _app("pages/4_Logs.py")
    at.text_input(key="logs_tag_re").set_value("loss(")
    at.run()
    assert not at.exception
    assert any("not a valid regular expression" in e for e in _texts(at, "error"))


def test_logs_on_sample_runs_draws_charts(runs_dir):
    if not SAMPLES.is_dir():
        pytest.skip("sample runs not recorded yet")
    at = _app("pages/4_Logs.py")
    assert not at.error
    assert len(at.get("plotly_chart")) >= 1
    at.text_input(key="logs_tag_re").set_value("^train/loss$")
    at.run()
    assert len(at.get("plotly_chart")) == 1


def test_live_falls_back_to_sample_runs(runs_dir):
    if not SAMPLES.is_dir():
        pytest.skip("sample runs not recorded yet")
    at = _app("pages/2_Live.py")
    assert any("sample runs" in t for t in _texts(at, "info"))
    assert at.selectbox(key="live_run").value
    assert len(at.get("plotly_chart")) >= 1  # loss curves of a finished sample run
    assert not [b for b in at.button if b.label == "Stop"]  # sample runs are finished
