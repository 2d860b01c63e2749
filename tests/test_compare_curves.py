"""lab.views.compare.curves' curve and timeline data, read from real event files through lab.events.

Event files are written with lab.engine.scalars.ScalarWriter (tensorboard's own
writer). The sys/gpu<i>/... samples here are written by the test: there is
no GPU on the test machine, so these stand in for NVML samples.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.engine.scalars import ScalarWriter
from lab.events import LogdirReader
from lab.runfolder import SAMPLE_RUNS
from lab.views.compare import curves as compare_curves
from lab.views.compare.comparison import choose_baseline, compare
from lab.views.compare.figures import run_figures
from lab.views.compare.table import frame
from lab.views.runscalars import run_scalars
from tests.helpers.compare_runs import load_runs, make_run, sample_sweep

T0 = 1_764_400_000.0  # 2025-11-29T07:06:40+00:00


def write(run_dir, sub, points):
    """points: list of (step, wall_time, {tag: value})."""
    w = ScalarWriter(run_dir / sub)
    for step, wall, values in points:
        w.add(values, step, wall)
    w.close()


def scalars_of(runs):
    return {r.key: run_scalars(LogdirReader(r.run_dir)) for r in runs}


@pytest.fixture
def two_runs(tmp_path):
    root = tmp_path / "runs"
    a = make_run(root, "a", created_at="2025-11-29T07:06:40+00:00", batch=64)
    b = make_run(
        root,
        "b",
        mode="ddp",
        devices=("cpu0", "cpu1"),
        created_at="2025-11-29T07:07:00+00:00",
        batch=64,
    )
    # a: the trainer started at T0 (summary started_at), first loss 1 s later
    write(
        a,
        "tb",
        [
            (10, T0 + 1, {"train/loss": 2.0}),
            (20, T0 + 2, {"train/loss": 1.0}),
            (30, T0 + 3, {"train/loss": 0.5}),
        ],
    )
    # b: no usable started_at -> time counts from its first event
    s = json.loads((b / "summary.json").read_text())
    s["started_at"] = None
    (b / "summary.json").write_text(json.dumps(s))
    write(b, "tb", [(10, T0 + 100, {"train/loss": 2.1}), (20, T0 + 100.5, {"train/loss": 1.1})])
    write(
        a,
        "sys",
        [
            (i, T0 + i, {"sys/gpu0/util_pct": 50.0 + i, "sys/gpu1/util_pct": 10.0 * i})
            for i in range(4)
        ],
    )
    write(
        b,
        "sys",
        [(i, T0 + 50 + 2 * i, {"sys/cpu_pct": 150.0, "sys/rss_mib": 700.0 + i}) for i in range(3)],
    )
    runs = load_runs(root)[::-1]  # a, b
    return runs, scalars_of(runs)


def test_curves_against_step_samples_and_wall(two_runs):
    runs, sc = two_runs
    by = {n: (x, y) for n, x, y in compare_curves.curve_traces(runs, sc, x="step")}
    assert by["a"][0].tolist() == [10, 20, 30] and by["a"][1].tolist() == [2.0, 1.0, 0.5]
    by = {n: x for n, x, _ in compare_curves.curve_traces(runs, sc, x="samples")}
    assert by["a"].tolist() == [640, 1280, 1920]
    by = {n: x for n, x, _ in compare_curves.curve_traces(runs, sc, x="wall")}
    assert by["a"] == pytest.approx([1.0, 2.0, 3.0])  # from the trainer's started_at
    assert by["b"] == pytest.approx([0.0, 0.5])  # from its first event
    assert compare_curves.curve_traces(runs, sc, tag="val/acc") == []
    with pytest.raises(ValueError, match="x must be one of"):
        compare_curves.curve_traces(runs, sc, x="epoch")


def test_system_panels_gpu_and_cpu(two_runs):
    runs, sc = two_runs
    sp = compare_curves.system_panels(runs, sc, metric="util")
    (name_a, traces_a), (name_b, traces_b) = sp.panels
    assert name_a == "a" and [t[0] for t in traces_a] == ["gpu0", "gpu1"]
    assert traces_a[0][1].tolist() == [0, 1, 2, 3] and traces_a[1][2].tolist() == [0, 10, 20, 30]
    assert [t[0] for t in traces_b] == ["cpu (process tree)"]
    assert traces_b[0][1].tolist() == [0, 2, 4]  # seconds since the run's first sample
    assert sp.y_range is None and "some of" in sp.note and "sys/cpu_pct" in sp.note
    only_gpu = compare_curves.system_panels(runs[:1], sc, metric="util")
    assert only_gpu.y_range == (0.0, 100.0) and only_gpu.note is None
    assert only_gpu.y_title == "GPU utilisation (%)"
    mem = compare_curves.system_panels(runs[1:], sc, metric="mem")
    assert mem.panels[0][1][0][2].tolist() == [700, 701, 702] and "sys/rss_mib" in mem.note


def test_no_system_samples_says_so(tmp_path):
    make_run(tmp_path / "r", "x")
    runs = load_runs(tmp_path / "r")
    sp = compare_curves.system_panels(runs, scalars_of(runs))
    assert sp.panels == [("x", [])] and "none of these runs has system samples" in sp.note.lower()


def test_sample_runs_line_up_step_for_step():
    """The shipped runs share seed and global batch: their losses agree step for step at first.

    Later, float rounding differences between reduction orders grow with
    training (measured: ~1e-7 relative at first, percent-level after ~150
    steps of 20 epochs), so only the first logged points are held to 1e-4.
    """
    shipped = sample_sweep(load_runs(SAMPLE_RUNS, sample=True), "sample")  # the Compare-modes one
    assert shipped, (
        f"{SAMPLE_RUNS} holds no recorded runs: the project ships them "
        "(scripts/record_sample_runs.py)"
    )
    # the strong-scaling runs (same global batch), one of each mode: the first repeat of the sweep
    strong = [r for r in shipped if r.scaling != "weak"]
    runs = [next(r for r in strong if run_figures(r).mode == m) for m in ("single", "dp", "ddp")]
    # repeats of the three modes, and a weak run
    assert len(strong) % 3 == 0 and len(shipped) > len(strong)
    traces = compare_curves.curve_traces(runs, scalars_of(runs), x="step")
    assert len(traces) == 3
    steps = [t[1] for t in traces]
    assert all(np.array_equal(steps[0], s) for s in steps) and len(steps[0]) >= 10
    losses = np.stack([t[2] for t in traces])
    first = losses[:, :10]
    assert np.max(np.abs(first - first[0]) / first[0]) < 1e-4
    assert losses[0, -1] < losses[0, 0]  # it learned something
    sc = scalars_of(runs)
    base = choose_baseline(runs)
    table = frame(compare(runs, baseline_key=base, scalars=sc))
    agree = table.set_index("mode")["loss matches baseline to step"]
    assert np.isnan(agree["single"]) and agree["dp"] >= steps[0][9] and agree["ddp"] >= steps[0][9]


def test_live_and_compare_draw_the_same_device_traces(two_runs):
    """One builder: the Live page's device charts of a run hold the traces Compare shows for it."""
    from lab.views.live import run_charts
    from lab.views.runscalars import split_sys

    runs, sc = two_runs
    for run, metric, title in (
        (runs[0], "util", "GPU utilisation"),
        (runs[1], "mem", "Memory (RSS) of the run's processes"),
    ):
        specs, _ = run_charts.sys_charts(split_sys(sc[run.key])[1])
        live = next(s for s in specs if s.title == title).traces
        ((_, panel),) = compare_curves.system_panels([run], sc, metric=metric).panels
        assert [t[0] for t in live] == [t[0] for t in panel] and len(live) >= 1
        for (_, lx, ly), (_, px, py) in zip(live, panel):
            np.testing.assert_array_equal(lx, px)
            np.testing.assert_array_equal(ly, py)
