"""lab/views/live/script_run.py and a script's progress in lab/views/live/progress.py: what the Live
page shows of a user's script run, from scalars written by torch's own SummaryWriter and read back
through lab.events."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lab.events import LogdirReader
from lab.views.live import progress, script_run
from lab.views.runscalars import run_scalars, split_sys


def series(steps, walls, values=None):
    steps = np.asarray(steps, dtype=np.int64)
    return SimpleNamespace(
        step=steps,
        wall_time=np.asarray(walls, dtype=float),
        value=np.asarray(values if values is not None else np.ones(len(steps)), dtype=float),
    )


def rec(state="running", total=0, events_dirs=(), run_dir="/runs/r", **cfg):
    return SimpleNamespace(
        run_id="r",
        state=state,
        kind="script",
        run_dir=run_dir,
        progress=None,
        summary=None,
        config={"total_steps": total, "cwd": "/work", **cfg},
        events_dirs=list(events_dirs),
    )


def test_progress_from_the_scripts_events_with_a_total():
    now = 1_000.0
    # 5 steps/s, last at 988
    scalars = {
        "Loss/train": series(range(10, 110, 10), np.arange(10) * 2.0 + 970),
        # samples count their own steps
        "sys/cpu_pct": series(range(40), np.linspace(960, 999, 40)),
    }
    p = progress.progress_of(rec(total=200), now=now, scalars=scalars)
    assert p.step == 100 and p.total_steps == 200 and p.fraction == pytest.approx(0.5)
    assert p.steps_per_sec == pytest.approx(5.0) and p.samples_per_sec is None
    assert p.eta_s == pytest.approx(100 / 5.0 - 12)  # less the time since the last point
    assert "step 100 / 200" in p.label and "5 steps/s" in p.label and "ETA" in p.label


def test_no_total_no_eta_and_a_finished_run_says_what_it_took():
    scalars = {
        "train/loss": series([1, 2, 3], [100.0, 101.0, 102.0]),
        "sys/rss_mib": series([0, 1], [99.0, 110.0]),
    }
    p = progress.progress_of(rec(), now=103.0, scalars=scalars)
    assert p.eta_s is None and p.fraction is None and "ETA" not in p.label and p.step == 3
    done = progress.progress_of(rec(state="succeeded"), now=500.0, scalars=scalars)
    assert (
        done.fraction == 1.0 and done.elapsed_s == pytest.approx(11.0) and "took 0:11" in done.label
    )
    stale = progress.progress_of(rec(), now=102.0 + 90, scalars=scalars)
    assert stale.stale_s == pytest.approx(90) and "no new step for 1:30" in stale.label
    assert progress.progress_of(rec(state="starting"), scalars={}).label == "starting"


def test_outside_dirs_leave_out_what_the_run_folder_reader_covers():
    r = rec(events_dirs=["/runs/r/tb", "/work/runs/Nov29", "/runs/rx/tb"])
    assert script_run.outside_dirs(r) == ["/work/runs/Nov29", "/runs/rx/tb"]


def test_charts_and_notes_from_real_summary_writer_events(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs" / "mine"))
    for step in range(1, 6):
        w.add_scalar("train/loss", 1.0 / step, step)
        w.add_scalar("Accuracy/val", step / 10, step)
        w.add_scalar("lr", 0.1, step)
    w.close()
    reader = LogdirReader(tmp_path / "runs" / "mine")
    train, sysd = split_sys(run_scalars(reader))
    specs = script_run.curve_charts(train)
    # the trainer's chart, then one per tag
    assert [s.title for s in specs] == ["Loss", "Accuracy/val", "lr"]
    assert specs[0].traces[0][1].tolist() == [1, 2, 3, 4, 5]
    assert script_run.waiting_note(rec(events_dirs=[str(tmp_path)]), train) is None
    note = script_run.waiting_note(rec(), {})
    assert note.startswith("No event files yet below /work.") and "--events-dir" in note
    assert (
        script_run.waiting_note(rec(events_dirs=["/x"]), {}) == "Linked /x: no scalars there yet."
    )
    many = {f"t{i:02d}": train["lr"] for i in range(30)}
    assert len(script_run.curve_charts(many)) == script_run.MAX_OTHER_CHARTS


def test_config_lines_of_a_script_run():
    lines = script_run.config_lines(
        rec(
            script="/w/t.py", args=["--name", "a b"], mode="ddp", nproc=2, events_dirs=["/w/runs/x"]
        )
    )
    assert (
        "script: /w/t.py" in lines
        and "args: --name 'a b'" in lines
        and "events_dirs: /w/runs/x" in lines
    )
