"""lab.views.logs.scalar_chart on real event files: smoothed over faint raw lines, a run's colour
from its name only, log and outlier-ignoring y axes, unified hover naming the runs, sections
by tag prefix, the point budget (spikes kept), and each chart's CSV and JSON."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from lab.events import LogdirReader
from lab.views.logs import scalar_chart as sc
from tests.logs_fixtures import write_events

WALL0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def scalars(tmp_path_factory):
    root = tmp_path_factory.mktemp("charts")
    steps = np.arange(4) * 5
    write_events(
        root / "a" / "events.out.tfevents.1.x",
        {
            "train/loss": (steps, np.array([3.0, 2.0, 1.0, 0.5])),
            "train/acc": (steps, np.array([0.1, 0.4, 0.7, 0.9])),
            "lr": (steps, np.full(4, 0.1)),
        },
        t0=WALL0,
        dt=2.0,
    )
    write_events(
        root / "nested" / "b" / "events.out.tfevents.1.x",
        {
            "train/loss": (steps[:3], np.array([2.5, 1.5, 0.7])),
            "val/loss": (steps[:1], np.array([2.0])),
        },
        t0=WALL0,
    )
    r = LogdirReader(root)
    r.refresh()
    return {n: r.scalars(n) for n in r.run_names()}


def _traces(fig):
    return [t for t in fig.data]


def test_colour_comes_from_the_name_only():
    c = sc.run_colour("exp3/lr0.1-bs32-s2")
    assert c == sc.run_colour("exp3/lr0.1-bs32-s2") and c in sc.PALETTE
    names = [f"exp{i}/run{j}" for i in range(10) for j in range(30)]
    # the palette is used, not one colour
    assert len({sc.run_colour(n) for n in names}) == len(sc.PALETTE)


def test_same_run_same_colour_on_every_chart_whatever_else_is_drawn(scalars):
    alone = sc.scalar_charts(scalars, ["a"], ["train/loss"], weight=0.6)
    both = sc.scalar_charts(scalars, ["nested/b", "a"], ["train/loss", "train/acc"], weight=0.6)
    colours = set()
    for chart in alone + both:
        for t in sc.scalar_figure(chart).data:
            if t.name == "a":
                colours.add(t.line.color)
    assert colours == {sc.run_colour("a")}


def test_smoothed_line_over_the_faint_raw_line(scalars):
    chart = sc.scalar_charts(scalars, ["a"], ["train/loss"], weight=0.6)[0]
    raw, smoothed = sc.scalar_figure(chart).data
    assert raw.opacity == sc.RAW_OPACITY and raw.hoverinfo == "skip"
    assert smoothed.opacity is None and raw.line.color == smoothed.line.color
    np.testing.assert_allclose(raw.y, [3.0, 2.0, 1.0, 0.5])
    last, out = 0.0, []
    for i, v in enumerate([3.0, 2.0, 1.0, 0.5], start=1):  # TensorBoard's debiased EMA, by hand
        last = last * 0.6 + 0.4 * v
        out.append(last / (1 - 0.6**i))
    np.testing.assert_allclose(smoothed.y, out, rtol=1e-6)
    np.testing.assert_allclose(smoothed.customdata, raw.y)  # the hover's raw value
    assert "%{fullData.name}" in smoothed.hovertemplate  # the run's name in the unified hover
    assert sc.scalar_figure(chart).layout.hovermode == "x unified"
    unsmoothed = sc.scalar_charts(scalars, ["a"], ["train/loss"], weight=0.0)[0]
    [only] = sc.scalar_figure(unsmoothed).data
    assert only.opacity is None and "%{fullData.name}" in only.hovertemplate


def test_log_axis_and_outlier_band(scalars):
    chart = sc.scalar_charts(scalars, ["a", "nested/b"], ["train/loss"])[0]
    plain = sc.scalar_figure(chart).layout.yaxis
    assert plain.type == "linear" and plain.range is None
    assert sc.scalar_figure(chart, log_y=True).layout.yaxis.type == "log"
    values = np.array([3.0, 2.0, 1.0, 0.5, 2.5, 1.5, 0.7])
    lo, hi = np.percentile(values, [5, 95])
    pad = (hi - lo) * 0.05
    np.testing.assert_allclose(
        sc.scalar_figure(chart, ignore_outliers=True).layout.yaxis.range, [lo - pad, hi + pad]
    )
    llo, lhi = np.percentile(np.log10(values), [5, 95])
    lpad = (lhi - llo) * 0.05
    np.testing.assert_allclose(
        sc.scalar_figure(chart, log_y=True, ignore_outliers=True).layout.yaxis.range,
        [llo - lpad, lhi + lpad],
    )


def test_outlier_band_ignores_a_spike():
    v = np.concatenate([np.linspace(1.0, 0.5, 1000), [1e6]])
    lo, hi = sc.outlier_range([v])
    assert hi < 2 and lo > 0.4
    assert sc.outlier_range([np.array([np.nan])]) is None
    assert sc.outlier_range([np.array([-1.0, 0.0])], log_y=True) is None
    assert sc.outlier_range([np.array([2.0, 2.0])]) == pytest.approx((1.9, 2.1))


def test_sections_by_tag_prefix(scalars):
    charts = sc.scalar_charts(
        scalars, ["a", "nested/b"], ["train/loss", "val/loss", "train/acc", "lr"]
    )
    assert [(name, [c.tag for c in cs]) for name, cs in sc.sections(charts)] == [
        ("train", ["train/loss", "train/acc"]),
        ("val", ["val/loss"]),
        (sc.NO_PREFIX, ["lr"]),
    ]
    assert [ln.run for ln in charts[1].lines] == ["nested/b"]  # run a has no val/loss


def test_wall_axis_and_bad_axis(scalars):
    chart = sc.scalar_charts(scalars, ["a"], ["train/loss"], axis="wall")[0]
    assert chart.x_is_time and sc.scalar_figure(chart).layout.xaxis.type == "date"
    with pytest.raises(ValueError, match="use one of step, relative, wall"):
        sc.scalar_charts(scalars, ["a"], ["train/loss"], axis="epoch")


def test_point_budget_keeps_spikes_and_pairs_raw_with_smoothed():
    from lab.events.columns import Series

    n = 200_000
    value = np.sin(np.arange(n) / 500.0)
    value[123_457] = 50.0
    s = Series(np.arange(n, dtype=np.int64), WALL0 + np.arange(n, dtype=float), value)
    chart = sc.scalar_charts(
        {f"r{i}": {"t": s} for i in range(6)}, [f"r{i}" for i in range(6)], ["t"], weight=0.9
    )[0]
    fig = sc.scalar_figure(chart)
    assert sum(len(t.x) for t in fig.data) <= sc.POINT_BUDGET
    raw, smoothed = fig.data[0], fig.data[1]
    assert max(raw.y) == 50.0 and list(raw.x) == list(smoothed.x)
    np.testing.assert_allclose(smoothed.y, chart.lines[0].smoothed[np.asarray(raw.x, dtype=int)])


def test_one_colour_key_instead_of_a_legend_on_each_chart(scalars):
    chart = sc.scalar_charts(scalars, ["a", "nested/b"], ["train/loss"])[0]
    assert sc.scalar_figure(chart).layout.showlegend is False
    key = sc.colour_key(["run<0>", "a"])
    assert "run&lt;0&gt;" in key and "<0>" not in key  # names escaped
    assert (
        key.index(sc.run_colour("run<0>"))
        < key.index("run&lt;0&gt;")
        < key.index(sc.run_colour("a"))
    )


def test_chart_csv_and_json_hold_every_point(scalars):
    chart = sc.scalar_charts(scalars, ["a", "nested/b"], ["train/loss"], weight=0.5)[0]
    df = pd.read_csv(io.BytesIO(sc.chart_csv(chart)))
    assert list(df.columns) == ["run", "step", "wall_time", "value", "smoothed"] and len(df) == 7
    np.testing.assert_allclose(df[df.run == "a"]["value"], [3.0, 2.0, 1.0, 0.5])
    np.testing.assert_allclose(
        df[df.run == "a"]["wall_time"], WALL0 + np.array([0, 5, 10, 15]) * 2.0
    )
    data = json.loads(sc.chart_json(chart))
    assert data["tag"] == "train/loss" and set(data["runs"]) == {"a", "nested/b"}
    # TensorBoard's [wall_time, step, value]
    assert data["runs"]["a"][1] == [pytest.approx(WALL0 + 10.0), 5, 2.0]
    assert sc.file_stem("train/loss") == "train_loss" and sc.file_stem("///") == "scalars"


def test_json_writes_nan_as_null():
    from lab.events.columns import Series

    s = Series(np.arange(2), np.arange(2.0), np.array([1.0, np.nan]))
    chart = sc.scalar_charts({"r": {"t": s}}, ["r"], ["t"])[0]
    assert json.loads(sc.chart_json(chart))["runs"]["r"][1][2] is None


def test_a_single_point_is_drawn_as_a_dot(scalars):
    chart = sc.scalar_charts(scalars, ["a", "nested/b"], ["val/loss", "train/loss"])
    [dot] = sc.scalar_figure(chart[0]).data  # nested/b logged val/loss once
    assert dot.mode == "markers" and dot.marker.color == sc.run_colour("nested/b")
    assert {t.mode for t in sc.scalar_figure(chart[1]).data} == {"lines"}
