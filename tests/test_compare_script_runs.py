"""Compare shows a user's script beside the trainer, on real runs: ``python -m lab compare`` and the
Compare page.

One recording for the module: examples/ddp_digits.py launched as the user's own script through
``python -m lab launch --script … --mode ddp --nproc 2`` (two gloo ranks under torchrun, its curves
in the folder its plain ``SummaryWriter()`` chose below its working directory) and a trainer run in
single mode, at the same global batch (64), both a few steps long, logging every step. The script
has no summary.json: its row must say ``derived``, its speedup must be of steps/s (the step rate of
train/loss against the trainer's) and say so, and the page must read its curves from the linked
folder outside the run folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from lab.engine import registry
from lab.engine.launch import launcher
from lab.events import LogdirReader, RunReader
from lab.runfolder import REPO_ROOT
from lab.views.compare import derived
from lab.views.compare.comparison import compare
from lab.views.compare.table import frame
from lab.views.runscalars import folder_scalars
from tests.helpers.cli import run_lab
from tests.helpers.compare_runs import load_runs
from tests.helpers.comparison import notes_shown

pytestmark = [pytest.mark.proc, pytest.mark.slow]
ONE_THREAD_CPU = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # every lab command here
PAGE = str(REPO_ROOT / "pages" / "3_Compare.py")
STEPS = "8"


def launch(root: Path, *args: str) -> str:
    r = run_lab(root, "launch", "--json", *args, **ONE_THREAD_CPU)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["run_id"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """``(runs root, trainer run id, script run id)``: both succeeded."""
    base = tmp_path_factory.mktemp("compare-script")
    root, work = base / "runs", base / "work"
    work.mkdir()
    script = launch(
        root,
        "--script",
        str(REPO_ROOT / "examples" / "ddp_digits.py"),
        "--mode",
        "ddp",
        "--nproc",
        "2",
        "--cwd",
        str(work),
        "--",
        "--epochs",
        "1",
        "--max-steps",
        STEPS,
        "--log-every",
        "1",
    )
    trainer = launch(
        root,
        "--mode",
        "single",
        "--batch-size",
        "64",
        "--image-size",
        "16",
        "--epochs",
        "1",
        "--max-steps",
        STEPS,
        "--log-every",
        "1",
        "--checkpoint",
        "none",
        "--name",
        "trainer",
    )
    for rid in (script, trainer):
        state = launcher.wait(rid, root, 240)
        assert state == "succeeded", (rid, state, (root / rid / "stdout.log").read_text()[-2000:])
    return root, trainer, script


def _rates(folder: str) -> np.ndarray:
    """Steps per second between the logged points of train/loss, read straight from the event
    files."""
    loss = RunReader(folder)
    loss.refresh()
    s = loss.scalars()["train/loss"]
    return np.diff(s.step) / np.diff(s.wall_time)


def test_lab_compare_json_marks_the_scripts_derived_figures(recorded):
    root, trainer, script = recorded
    r = run_lab(root, "compare", trainer, script, "--json", **ONE_THREAD_CPU)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    runs = {x["run_id"]: x for x in doc["runs"]}
    base, mine = runs[trainer], runs[script]
    # the example logs no rate
    assert doc["baseline"] == trainer and doc["throughput_tag"] == derived.STEP_RATE
    assert (base["figures"], base["kind"], base["speedup_of"]) == (
        "measured",
        "trainer",
        "samples/s",
    )
    assert base["throughput"]["median"] > 0 and base["peak_mem_of"] == "allocator"
    assert (mine["figures"], mine["kind"], mine["mode"]) == ("derived", "script", "ddp")
    assert mine["devices"] == ["cpu0", "cpu1"] and mine["throughput"] is None
    assert mine["speedup_of"] == "steps/s of train/loss"
    # steps/s: medians of the real step rates of each run's own events (the script's in its linked
    # folder)
    linked = registry.get_run(script, root).events_dirs
    assert len(linked) == 1 and Path(linked[0]).parent.name == "runs"
    for rates, fig in ((_rates(linked[0]), mine), (_rates(str(root / trainer / "tb")), base)):
        steady = np.sort(rates[1:])
        assert fig["steps_per_sec"]["median"] == pytest.approx(float(np.median(steady)))
        assert (
            steady[0]
            <= fig["steps_per_sec"]["ci_low"]
            <= fig["steps_per_sec"]["ci_high"]
            <= steady[-1]
        )
    assert mine["speedup"]["value"] == pytest.approx(
        mine["steps_per_sec"]["median"] / base["steps_per_sec"]["median"]
    )
    # 2 processes vs 1
    assert mine["efficiency"]["value"] == pytest.approx(mine["speedup"]["value"] / 2)
    # no GPU here: no NVML memory to derive
    assert mine["wall_time_s"] > 0 and mine["peak_mem_mib"] == {}
    warnings = " ".join(doc["warnings"])
    assert "figures are derived (a user's script" in warnings and "is of steps/s" in warnings
    text = run_lab(root, "compare", trainer, script, **ONE_THREAD_CPU)
    assert (
        text.returncode == 0 and "derived" in text.stdout and "steps/s of train/loss" in text.stdout
    )


def test_the_compare_page_shows_the_script_beside_the_trainer(recorded, monkeypatch):
    root, trainer, script = recorded
    monkeypatch.setenv("LAB_RUNS_DIR", str(root))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception
    # both finished: chosen
    assert sorted(at.multiselect(key="cmp_runs").value) == sorted([trainer, script])
    assert at.selectbox(key="cmp_baseline").value == trainer
    assert at.selectbox(key="cmp_tp_tag").value == derived.STEP_RATE
    assert at.selectbox(key="cmp_loss_tag").value == "train/loss"
    shown = at.dataframe[0].value.reset_index(drop=True)
    runs = [r for r in load_runs(root) if r.key in (trainer, script)]
    runs.sort(key=lambda r: at.multiselect(key="cmp_runs").value.index(r.key))
    scalars = {r.key: folder_scalars(r.event_folders, LogdirReader) for r in runs}
    expected = frame(compare(runs, trainer, scalars, derived.STEP_RATE, "train/loss"))
    pd.testing.assert_frame_equal(shown, expected, check_dtype=False)
    table = shown.set_index("figures")
    assert (
        table.loc["derived", "speedup of"] == "steps/s of train/loss"
        and table.loc["measured", "speedup"] == 1.0
    )
    assert table.loc["derived", "scaling"] == "strong (assumed)"
    # its final loss can only come from the folder SummaryWriter() chose, outside the run folder
    assert table.loc["derived", "final train loss"] == pytest.approx(
        float(scalars[script]["train/loss"].value[-1])
    )
    warnings = notes_shown(at)
    assert any("figures are derived" in w for w in warnings) and any(
        "is of steps/s" in w for w in warnings
    )
    assert any("Loss tag" in s.label for s in at.selectbox)
    # the script as baseline: the trainer by steps/s
    at.selectbox(key="cmp_baseline").set_value(script).run()
    assert not at.exception
    row = at.dataframe[0].value.set_index("figures").loc["measured"]
    assert row["speedup of"] == "steps/s of train/loss" and row["speedup"] > 0
