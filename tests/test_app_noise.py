"""AppTest of what the pages say about noise: Home's repeats field starts interleaved runs, Live and
Compare show the busy-machine warning, Compare shows intervals, verdicts and a sweep's repeats.

The Live and Compare cases use copies of the real recorded sample runs (sample_data/runs) in a
private runs folder, with the supervisor's ``interference`` record added to one status.json."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lab.runfolder import SAMPLE_RUNS
from lab.views.compare import table as cols
from tests.helpers.comparison import notes_shown

REPO = Path(__file__).resolve().parent.parent
BUSY = {
    "busy": True,
    "reasons": [
        "other processes kept 1.5 of the 2 cores busy on average, more than 20% of every "
        "core in 80% of 40 samples"
    ],
    "other_cpu_cores_mean": 1.5,
    "busy_fraction": 0.8,
    "samples": 40,
    "foreign_gpu_processes": [],
    "gpu_note": None,
}


def _sample(mode: str) -> Path:
    return next(
        d
        for d in sorted(SAMPLE_RUNS.iterdir())
        if (d / "summary.json").exists()
        and json.loads((d / "summary.json").read_text())["mode"] == mode
    )


def _copy(mode: str, runs_dir: Path, new_id: str | None = None, busy: bool = False) -> str:
    src = _sample(mode)
    dst = runs_dir / (new_id or src.name)
    shutil.copytree(src, dst)
    if busy:
        st = json.loads((dst / "status.json").read_text())
        (dst / "status.json").write_text(json.dumps(dict(st, interference=BUSY)))
    return dst.name


def test_live_warns_of_a_busy_machine(runs_dir):
    busy = _copy("single", runs_dir, busy=True)
    other = _copy("ddp", runs_dir)
    at = AppTest.from_file(str(REPO / "pages" / "2_Live.py"), default_timeout=30).run()
    at.selectbox(key="live_run").set_value(busy).run()
    assert not at.exception
    assert any(
        w.value.startswith("Busy machine: other processes kept 1.5 of the 2 cores")
        for w in at.warning
    )
    at.selectbox(key="live_run").set_value(other).run()
    assert not at.exception and not any("Busy machine" in w.value for w in at.warning)


def test_compare_shows_intervals_busy_runs_and_repeats(runs_dir):
    # one sweep that ran single twice and ddp once: the single runs are repeats
    ids = [
        _copy("single", runs_dir, "20261129-084636-single-a-r1", busy=True),
        _copy("ddp", runs_dir),
        _copy("single", runs_dir, "20261129-084637-single-a-r2"),
    ]
    for rid in ids:
        p = runs_dir / rid / "run.json"
        p.write_text(
            json.dumps(dict(json.loads(p.read_text()), sweep_id="sweep-20261129-084636-beef"))
        )
    at = AppTest.from_file(str(REPO / "pages" / "3_Compare.py"), default_timeout=30).run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("run")
    assert len(table) == 3 and set(table[cols.VERDICT]) <= {
        "baseline",
        "within noise",
        "faster",
        "slower",
    }
    # every run has its group's interval; the baseline group's runs show its own spread
    for verdict, shown in zip(table[cols.VERDICT], table[cols.SPEEDUP_CI]):
        assert shown.startswith("baseline: ") if verdict == "baseline" else "× (" in shown
    # the run marked busy is "busy"; the two copies keep their samples' own record ("quiet", or ""
    # where a sample
    # was recorded before interference was)
    machine = list(table[cols.MACHINE])
    assert machine.count("busy") == 1 and set(machine) <= {"busy", "quiet", ""}
    busy = [w for w in notes_shown(at) if "Busy machine" in w]
    assert len(busy) == 1 and "1.5 of the 2 cores" in busy[0]
    reps = at.dataframe[1].value.set_index("mode")
    assert reps.loc["single", "repeats"] == 2 and reps.loc["ddp", "repeats"] == 1
    assert any("**Noise.**" in m.value for m in at.markdown)


@pytest.mark.proc
def test_home_repeats_field_starts_interleaved_runs(runs_dir):
    from lab.engine.launch.sweeps import stop_sweep
    from lab.engine.registry import list_runs

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30).run()
    at.number_input(key="home_repeats").set_value(2)
    at.button(key="home_compare").click()
    at.run(timeout=60)
    assert not at.exception and not at.error, [e.value for e in at.error]
    sweep_id, run_ids = at.session_state["home_sweep"]
    try:
        modes = [
            json.loads((runs_dir / r / "run.json").read_text())["config"]["mode"] for r in run_ids
        ]
        assert modes == ["single", "dp", "ddp"] * 2
        assert len(list_runs(runs_dir)) == 6
    finally:
        stop_sweep(sweep_id, runs_dir, grace_s=2)
    deadline = time.monotonic() + 15
    while any(r.state not in ("stopped", "succeeded", "failed") for r in list_runs(runs_dir)):
        assert time.monotonic() < deadline
        time.sleep(0.3)
