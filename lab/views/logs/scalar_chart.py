"""The Logs page's scalar charts, drawn as TensorBoard draws them.

Owns one chart per tag with one line per run: the smoothed line over the raw
one in a faint shade of the same colour, a colour fixed by the run's name
(the same on every chart and in the colour key, whatever else is selected), a
linear or log y axis, TensorBoard's "ignore outliers in chart scaling" (the
y axis spans the 5th to 95th percentile of the drawn values), plotly's
unified hover naming every run at that x with its smoothed and raw value,
the charts grouped by tag prefix (``train/``, ``val/``…) as TensorBoard's
sections, and each chart's data as CSV and as JSON. Lines are reduced with
``lab.views.downsample`` on the raw values (spikes survive) before
they are drawn; the downloads hold every point.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from lab.views.logs.browse import X_AXES, X_TITLES, smooth, x_values

# d3's category10 then CARTO's Bold: hues that read on white and differ from each other.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#7f3c8d",
    "#11a579",
    "#3969ac",
    "#f2b701",
    "#e73f74",
    "#80ba5a",
    "#e68310",
    "#008695",
    "#cf1c90",
    "#f97b72",
    "#a5aa99",
)
RAW_OPACITY = 0.25
POINT_BUDGET = 24_000  # points per chart over all its lines: what a browser draws quickly
NO_PREFIX = "(no prefix)"
OUTLIER_BAND = (5.0, 95.0)
_HOVER = "%{fullData.name}: %{y:.4g}"  # the run's name in plotly's unified hover, then its value


@dataclass(frozen=True)
class RunLine:
    """One run on one chart: its x, the raw values, the smoothed ones (None: smoothing off), its
    Series."""

    run: str
    x: np.ndarray
    raw: np.ndarray
    smoothed: np.ndarray | None
    series: Any


@dataclass(frozen=True)
class ScalarChart:
    tag: str
    x_title: str
    lines: list[RunLine]
    x_is_time: bool = False
    weight: float = 0.0


def run_colour(run: str) -> str:
    """The colour of a run on every chart: from a hash of its name, so it never depends on the other
    runs.

    A cryptographic hash, not CRC-32: a CRC of names one character apart (``s1``, ``s2``) differs by
    a fixed pattern, which gives sibling runs the same colour far more often than chance."""
    digest = hashlib.blake2s(run.encode("utf-8"), digest_size=4).digest()
    return PALETTE[int.from_bytes(digest, "big") % len(PALETTE)]


def scalar_charts(
    scalars_by_run: Mapping[str, Mapping[str, Any]],
    runs: Sequence[str],
    tags: Sequence[str],
    axis: str = "step",
    weight: float = 0.0,
) -> list[ScalarChart]:
    """One chart per tag that some run has, one line per run that has it."""
    if axis not in X_AXES:
        raise ValueError(f"unknown x axis {axis!r}: use one of {', '.join(X_AXES)}")
    charts = []
    for tag in tags:
        lines = []
        for run in runs:
            s = scalars_by_run.get(run, {}).get(tag)
            if s is None or not len(s.value):
                continue
            raw = np.asarray(s.value, dtype=float)
            lines.append(
                RunLine(run, x_values(s, axis), raw, smooth(raw, weight) if weight > 0 else None, s)
            )
        if lines:
            charts.append(ScalarChart(tag, X_TITLES[axis], lines, axis == "wall", weight))
    return charts


def sections(charts: Sequence[ScalarChart]) -> list[tuple[str, list[ScalarChart]]]:
    """Charts grouped by their tag's first path component, sections in order of their first
    chart."""
    out: dict[str, list[ScalarChart]] = {}
    for c in charts:
        head, sep, _ = c.tag.partition("/")
        out.setdefault(head if sep else NO_PREFIX, []).append(c)
    return list(out.items())


# Charts built for the first screen; the sections past them start closed and build nothing until
# opened (TensorBoard likewise draws a chart only when it scrolls into view): a figure costs
# ~0.2 s here whatever the number of runs, and a lab run has ~19 tags.
FIRST_SCREEN_CHARTS = 8


def starts_open(
    groups: Sequence[tuple[str, Sequence[ScalarChart]]], budget: int = FIRST_SCREEN_CHARTS
) -> list[bool]:
    """Which sections start open: the first always, then each next one while the charts of the
    open sections stay within ``budget``; once one stays closed, so do all after it."""
    out, drawn = [], 0
    for i, (_, group) in enumerate(groups):
        take = i == 0 or (all(out) and drawn + len(group) <= budget)
        out.append(take)
        drawn += len(group) if take else 0
    return out


def outlier_range(values: Sequence[np.ndarray], log_y: bool = False) -> tuple[float, float] | None:
    """The y range spanning the 5th-95th percentile of ``values``, padded 5%; log10 units when
    ``log_y``."""
    v = (
        np.concatenate([np.asarray(a, dtype=float).ravel() for a in values])
        if len(values)
        else np.empty(0)
    )
    v = v[np.isfinite(v)]
    if log_y:
        v = np.log10(v[v > 0])
    if not len(v):
        return None
    lo, hi = (float(x) for x in np.percentile(v, OUTLIER_BAND))
    pad = (hi - lo) * 0.05 or max(abs(lo) * 0.05, 1e-9)
    return lo - pad, hi + pad


def _indices(n: int, raw: np.ndarray, max_points: int) -> np.ndarray:
    """Which points to draw: min-max buckets of the raw values, the same points for the smoothed
    line."""
    from lab.views.downsample import keep_indices

    if n <= max_points:
        return np.arange(n)
    return keep_indices(raw, max_points)  # a series' blocks when ``raw`` is its value array


def _x(x: np.ndarray, is_time: bool) -> np.ndarray:
    return x.astype("datetime64[ms]") if is_time else x


def _add_run(fig: go.Figure, line: RunLine, max_points: int, is_time: bool) -> None:
    ix = _indices(len(line.raw), line.raw, max_points)
    x, raw = _x(line.x[ix], is_time), line.raw[ix]
    colour = run_colour(line.run)
    # A run with one point (the metric add_hparams writes) would be an invisible line: a dot then.
    mode = "lines" if len(ix) > 1 else "markers"
    common = dict(
        mode=mode,
        legendgroup=line.run,
        name=line.run,
        line=dict(color=colour, width=1.5),
        marker=dict(color=colour, size=7),
    )
    if line.smoothed is None:
        fig.add_trace(go.Scatter(x=x, y=raw, hovertemplate=_HOVER + "<extra></extra>", **common))
        return
    # The raw line first, faint, so the smoothed one is drawn over it; the hover names the run once.
    fig.add_trace(go.Scatter(x=x, y=raw, opacity=RAW_OPACITY, hoverinfo="skip", **common))
    fig.add_trace(
        go.Scatter(
            x=x,
            y=line.smoothed[ix],
            customdata=raw,
            hovertemplate=_HOVER + " (raw %{customdata:.4g})<extra></extra>",
            **common,
        )
    )


def scalar_figure(
    chart: ScalarChart, *, log_y: bool = False, ignore_outliers: bool = False, height: int = 360
) -> go.Figure:
    """The chart as a plotly figure (see the module docstring for what it shows)."""
    fig = go.Figure()
    per_line = max(
        200, min(2000, POINT_BUDGET // max(1, len(chart.lines) * (1 if chart.weight <= 0 else 2)))
    )
    for line in chart.lines:
        _add_run(fig, line, per_line, chart.x_is_time)
    fig.update_xaxes(title_text=chart.x_title, type="date" if chart.x_is_time else None)
    fig.update_yaxes(title_text=chart.tag.rsplit("/", 1)[-1], type="log" if log_y else "linear")
    if ignore_outliers:
        drawn = [ln.raw if ln.smoothed is None else ln.smoothed for ln in chart.lines]
        band = outlier_range(drawn, log_y)
        if band is not None:
            fig.update_yaxes(range=list(band), autorange=False)
    # No legend on the chart: one colour key above all charts (``colour_key``) names the runs, as
    # TensorBoard's runs list does, and leaves the plot its height whatever the number of runs.
    fig.update_layout(
        height=height, margin=dict(l=50, r=20, t=20, b=40), hovermode="x unified", showlegend=False
    )
    return fig


def colour_key(runs: Sequence[str]) -> str:
    """The legend of every chart: the runs with their colours, as one line of HTML (names
    escaped)."""
    return " &nbsp; ".join(
        f'<span style="white-space:nowrap"><span style="color:{run_colour(r)}">&#9632;</span> '
        f"{html.escape(r)}</span>"
        for r in runs
    )


def chart_csv(chart: ScalarChart) -> bytes:
    """Every point of the chart: ``run, step, wall_time, value`` (+ ``smoothed`` when smoothing is
    on)."""
    import pandas as pd

    frames = []
    for ln in chart.lines:
        f = pd.DataFrame(
            {
                "run": ln.run,
                "step": np.asarray(ln.series.step, dtype=np.int64),
                "wall_time": np.asarray(ln.series.wall_time, dtype=float),
                "value": ln.raw,
            }
        )
        if ln.smoothed is not None:
            f["smoothed"] = ln.smoothed
        frames.append(f)
    buf = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(buf, index=False, float_format="%.9g")
    return buf.getvalue().encode()


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def chart_json(chart: ScalarChart) -> bytes:
    """The chart's points as TensorBoard's JSON download, per run: ``{"tag", "runs": {run:
    [[wall_time, step, value], ...]}}``.

    Non-finite values are ``null`` (JSON has no NaN).
    """
    runs = {}
    for ln in chart.lines:
        wall = np.asarray(ln.series.wall_time, dtype=float).tolist()
        step = np.asarray(ln.series.step, dtype=np.int64).tolist()
        runs[ln.run] = [[w, s, _finite(v)] for w, s, v in zip(wall, step, ln.raw.tolist())]
    return json.dumps({"tag": chart.tag, "runs": runs}).encode()


def file_stem(tag: str) -> str:
    """A file name for a tag's download (``train/loss`` -> ``train_loss``)."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in tag).strip("_") or "scalars"
