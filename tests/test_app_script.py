"""The Launch and Live pages with a user's own script (AppTest, real runs on the CPU).

Both examples are launched from the Launch page's "My script" form, the DDP
one as two gloo ranks: each must end ``succeeded`` with its
``SummaryWriter()`` folder linked and its loss read back point for point (the
checks of tests/test_script_runs.py), and the Live page must draw the
script's loss and say its steps per second. A script that writes no event
files is shown running with its log, and "no event files yet below" its
folder, and the Live page's Stop ends it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers.script_runs import EXAMPLES, SHORT, check_curves

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.proc, pytest.mark.slow]


def _app(page: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def _launch_script(at: AppTest, script: Path, args: str, cwd: Path, mode: str) -> str:
    at.radio(key="launch_kind").set_value("script").run()
    at.text_input(key="launch_script_path").set_value(str(script))
    at.text_input(key="launch_script_args").set_value(args)
    at.text_input(key="launch_script_cwd").set_value(str(cwd))
    at.radio(key="launch_script_mode").set_value(mode)
    at.text_area(key="launch_script_env").set_value("OMP_NUM_THREADS=1")
    at.run()
    assert not at.error, [e.value for e in at.error]
    assert str(script) in at.code[0].value and f"cd {cwd}" in at.code[0].value
    at.button(key="launch_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Launched" in s.value for s in at.success)
    return at.session_state["launch_last"]


def test_both_examples_from_the_launch_page_succeed_and_their_curves_are_linked(runs_dir, tmp_path):
    from lab.engine import registry
    from lab.engine.launch import launcher

    ddp_cwd, single_cwd = tmp_path / "ddp", tmp_path / "single"
    ddp_cwd.mkdir()
    single_cwd.mkdir()
    at = _app("pages/1_Launch.py")
    ddp = _launch_script(at, EXAMPLES / "ddp_digits.py", " ".join(SHORT), ddp_cwd, "ddp")
    # two gloo ranks by default on the CPU
    assert registry.get_run(ddp, runs_dir).config["nproc"] == 2
    single = _launch_script(
        _app("pages/1_Launch.py"), EXAMPLES / "dp_digits.py", " ".join(SHORT), single_cwd, "single"
    )
    for rid, cwd, prefix in ((ddp, ddp_cwd, "[default0]:"), (single, single_cwd, "")):
        assert launcher.wait(rid, runs_dir, 240) == "succeeded", registry.get_run(
            rid, runs_dir
        ).diagnosis
        rec = registry.get_run(rid, runs_dir)
        assert rec.kind == "script"
        check_curves(rec.to_json(), cwd, runs_dir / rid, prefix)
    assert registry.get_run(ddp, runs_dir).mode == "ddp"

    live = _app("pages/2_Live.py")
    live.selectbox(key="live_run").set_value(ddp).run()
    assert not live.exception
    assert any(m.value == "### succeeded" for m in live.markdown)
    assert [m for m in live.metric if m.label == "Steps/s"]
    charts = live.get("plotly_chart")
    assert charts and any("Loss" in str(c.proto.spec) for c in charts)
    # per-rank logs, as for the trainer's DDP runs
    assert any("rank 1" in str(t.label) for t in live.tabs)


def test_a_script_without_event_files_is_watched_and_stopped_from_live(runs_dir, tmp_path):
    from lab.engine import registry

    script = tmp_path / "quiet.py"
    script.write_text(
        "import time\nprint('working without TensorBoard', flush=True)\ntime.sleep(120)\n"
    )
    at = _app("pages/1_Launch.py")
    rid = _launch_script(at, script, "", tmp_path, "single")
    deadline = time.monotonic() + 30
    while "working" not in (
        (runs_dir / rid / "stdout.log").read_text()
        if (runs_dir / rid / "stdout.log").exists()
        else ""
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    live = _app("pages/2_Live.py")
    assert live.selectbox(key="live_run").value == rid
    assert any(m.value == "### running" for m in live.markdown)
    assert any(i.value.startswith(f"No event files yet below {tmp_path}.") for i in live.info)
    assert any("working without TensorBoard" in c.value for c in live.code)
    live.button(key="live_stop").click().run(timeout=30)
    assert not live.exception
    assert registry.get_run(rid, runs_dir).state == "stopped"
    assert registry.get_run(rid, runs_dir).events_dirs == []


def test_launch_sweeps_a_script_over_its_own_flag_or_names_the_fix(runs_dir, tmp_path):
    import json

    from lab.engine.launch import launcher
    from lab.engine.registry import list_runs

    at = _app("pages/1_Launch.py")
    at.radio(key="launch_kind").set_value("script").run()
    at.text_input(key="launch_script_path").set_value(str(EXAMPLES / "ddp_digits.py"))
    at.text_input(key="launch_script_args").set_value(" ".join(SHORT))
    at.text_input(key="launch_script_cwd").set_value(str(tmp_path))
    at.multiselect(key="launch_cmp_modes").set_value(["single"])
    at.text_area(key="launch_cmp_vary").set_value("l r=0.1,0.01")  # no flag name
    at.run()
    at.button(key="launch_cmp_go").click()
    at.run(timeout=60)
    assert any("no flag name" in e.value for e in at.error), at.error
    assert not list_runs(runs_dir)  # nothing started
    at.text_area(key="launch_cmp_vary").set_value("lr=0.1,0.01\n")
    at.run()
    at.button(key="launch_cmp_go").click()
    at.run(timeout=60)
    assert not at.exception and any("Sweep" in s.value for s in at.success)
    runs = list_runs(runs_dir)
    records = [json.loads((runs_dir / r.run_id / "run.json").read_text()) for r in runs]
    assert sorted((d["varied"]["lr"], d["argv"][-1]) for d in records) == [
        ("0.01", "0.01"),
        ("0.1", "0.1"),
    ]  # each run's script got its own --lr
    for r in runs:  # the values are the point here, not the training
        launcher.stop(r.run_id, runs_dir)
