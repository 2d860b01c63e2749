"""training.throughput: summary.json's ``throughput`` is the lab's own arithmetic
(lab.views.compare.spread) on the run's own events, for a real trainer run; and the two
implementations agree window for window."""

from __future__ import annotations

import json
import random

import pytest

from lab.events import LogdirReader
from lab.views.compare.spread import median_spread, steady_windows
from lab.views.runscalars import run_scalars
from tests.helpers.train_run import trainer
from training.throughput import window_spread


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 9, 20, 41])
def test_same_figures_as_the_lab(n):
    rng = random.Random(n)
    # out of order on purpose: the warm-up window is the first *step*
    steps = rng.sample(range(1, 1000), n)
    rates = [rng.uniform(100, 200) for _ in range(n)]
    ours = window_spread(list(zip(steps, rates)))
    lab = median_spread(steady_windows(steps, rates))
    assert ours == {
        "median": lab.median,
        "ci_low": lab.ci_low,
        "ci_high": lab.ci_high,
        "windows": lab.windows,
    }


def test_no_window_and_non_finite_windows():
    assert window_spread([]) is None
    # the only steady window is not a number
    assert window_spread([(1, 5.0), (2, float("nan"))]) is None
    assert window_spread([(1, 1.0), (2, 3.0), (3, float("inf")), (4, 2.0)])["windows"] == 2


@pytest.mark.proc
def test_summary_throughput_equals_the_lab_on_the_runs_events(tmp_path):
    run = tmp_path / "run"
    res = trainer(
        "--log-dir",
        str(run),
        "--epochs",
        "2",
        "--max-steps",
        "24",
        "--log-every",
        "2",
        "--image-size",
        "16",
        "--batch-size",
        "64",
        "--checkpoint",
        "none",
    )
    assert res.returncode == 0, res.stderr
    tp = json.loads((run / "summary.json").read_text())["throughput"]
    rate = run_scalars(LogdirReader(str(run)))["perf/samples_per_sec"]
    lab = median_spread(steady_windows(rate.step, rate.value))
    assert tp["windows"] == 11 == lab.windows  # 12 windows of 2 steps, the first left out
    # exact: the trainer keeps each window as the float32 the event file holds
    assert (tp["median"], tp["ci_low"], tp["ci_high"]) == (lab.median, lab.ci_low, lab.ci_high)
    assert tp["ci_low"] <= tp["median"] <= tp["ci_high"] and tp["ci_low"] > 0
