"""lab.views.charts: the point cap per trace, minima and maxima kept, timelines, bars."""

from __future__ import annotations

import numpy as np
import pytest

from lab.views import charts


def spiky(n: int = 200_000, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.arange(n, dtype=float)
    y = rng.normal(0.0, 1.0, n)
    y[int(n * 0.617) + 3] = 1e6  # a spike and a dip that a naive stride would drop
    y[int(n * 0.271) + 1] = -1e6
    return x, y


def test_line_figure_caps_points_and_keeps_extremes():
    x, y = spiky()
    fig = charts.line_figure(
        [("a", x, y), ("b", x, -y)], x_title="step", y_title="loss", max_points=2000
    )
    assert len(fig.data) == 2
    for tr in fig.data:
        assert 0 < len(tr.y) <= 2000
    a, b = fig.data
    assert max(a.y) == 1e6 and min(a.y) == -1e6
    assert max(b.y) == 1e6 and min(b.y) == -1e6
    assert float(int(200_000 * 0.617) + 3) in list(a.x) and float(int(200_000 * 0.271) + 1) in list(
        a.x
    )
    assert sum(len(tr.y) for tr in fig.data) <= 4000  # what the browser gets
    # x stays in order, so the line is drawn left to right
    assert np.all(np.diff(np.asarray(a.x)) >= 0)


def test_short_traces_are_drawn_whole():
    fig = charts.line_figure([("a", [0, 1, 2], [3.0, 1.0, 2.0])], x_title="s", y_title="v")
    assert list(fig.data[0].y) == [3.0, 1.0, 2.0]
    assert fig.layout.xaxis.title.text == "s" and fig.layout.yaxis.title.text == "v"


def test_line_figure_options():
    fig = charts.line_figure(
        [("a", [1.7e12, 1.7e12 + 1000], [1.0, 2.0])],
        x_title="t",
        y_title="v",
        x_is_time=True,
        log_y=True,
        y_range=(0, 1),
    )
    assert fig.layout.xaxis.type == "date" and fig.layout.yaxis.type == "log"
    assert str(fig.data[0].x[0]).startswith("2023-11-14")


def test_bad_trace_is_a_clear_error():
    with pytest.raises(ValueError, match="equal length"):
        charts.line_figure([("a", [1, 2], [1.0])], x_title="s", y_title="v")


def test_timeline_side_by_side_shared_colours():
    x, y = spiky(50_000)
    panels = [("run A", [("gpu0", x, y), ("gpu1", x, y)]), ("run B", [("gpu0", x, y)])]
    fig = charts.timeline_figure(panels, y_title="util (%)", y_range=(0, 100), max_points=1000)
    assert len(fig.data) == 3
    assert all(len(t.y) <= 1000 for t in fig.data)
    assert [t.showlegend for t in fig.data] == [True, True, False]  # gpu0 listed once
    assert fig.data[0].line.color == fig.data[2].line.color != fig.data[1].line.color
    assert fig.data[0].xaxis == "x" and fig.data[2].xaxis == "x2"  # two subplots, side by side
    assert [a.text for a in fig.layout.annotations] == ["run A", "run B"]
    assert list(fig.layout.yaxis.range) == [0, 100]


def test_timeline_wraps_after_cols():
    panels = [(f"r{i}", [("gpu0", [0, 1], [1.0, 2.0])]) for i in range(5)]
    fig = charts.timeline_figure(panels, y_title="%", cols=3)
    assert fig.layout.height == 2 * 380


def test_bar_and_grouped_bar():
    fig = charts.bar_figure(["single", "ddp"], [1000.0, float("nan")], y_title="samples/s")
    assert list(fig.data[0].y) == [1000.0, None] and list(fig.data[0].text) == ["1000.0", ""]
    fig = charts.grouped_bar_figure(
        ["single", "ddp"], {"cpu0": [400.0, 300.0], "cpu1": [None, 310.0]}, y_title="MiB"
    )
    assert fig.layout.barmode == "group"
    assert [t.name for t in fig.data] == ["cpu0", "cpu1"]
    assert list(fig.data[1].y) == [None, 310.0]
    with pytest.raises(ValueError, match="2 categories"):
        charts.grouped_bar_figure(["a", "b"], {"x": [1.0]}, y_title="v")


def test_stacked_bars_one_row_per_bar_first_on_top():
    fig = charts.stacked_bar_figure(
        ["ddp", "ddp · communication"],
        {"forward": [1.5, None], "idle": [0.0, 0.0], "hidden": [None, 2.0]},
        x_title="ms",
        colours={"forward": "#111111", "hidden": "#222222"},
        patterns={"hidden": "/"},
    )
    # a segment that is zero everywhere is left out
    assert [t.name for t in fig.data] == ["forward", "hidden"]
    assert fig.layout.barmode == "stack" and fig.layout.yaxis.autorange == "reversed"
    forward, hidden = fig.data
    assert list(forward.y) == ["ddp", "ddp · communication"] and list(forward.x) == [1.5, None]
    assert (
        forward.orientation == "h"
        and forward.marker.color == "#111111"
        and list(forward.text) == ["1.5", ""]
    )
    assert hidden.marker.pattern.shape == "/" and hidden.marker.pattern.fgcolor == "#222222"
    with pytest.raises(ValueError, match="2 rows"):
        charts.stacked_bar_figure(["a", "b"], {"x": [1.0]}, x_title="ms")
