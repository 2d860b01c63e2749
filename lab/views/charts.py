"""Plotly figures for every page: lines, per-run timelines, bars, grouped bars.

This module owns how our charts look and, above all, how many points they
carry: every line trace is reduced with ``lab.views.downsample`` (which keeps
each bucket's minimum and maximum, so spikes and dips survive) before it is
drawn, so a page never ships 200k points to the browser. Pages and the HTML
export call these functions and only render the result.

Public API (stable; other pages build on it):

- ``Trace``: a ``(name, x, y)`` tuple, x and y 1-D array-likes of equal length.
- ``line_figure(traces, *, x_title, y_title, title=None, max_points=2000,
  log_y=False, x_is_time=False, y_range=None, distinct_dashes=False) -> go.Figure``:
  one line per trace, overlaid; ``spec_figure(spec, *, title=True)`` draws a
  ``lab.views.text.ChartSpec`` with it.
- ``timeline_figure(panels, *, y_title, x_title="time (s)", title=None,
  max_points=2000, y_range=None, cols=3) -> go.Figure``: one subplot per panel
  (e.g. per run), each panel a ``(panel_title, [Trace, ...])``, side by side
  with a shared y axis, wrapping after ``cols`` columns.
- ``bar_figure(labels, values, *, y_title, title=None, text_format=".1f")``.
- ``grouped_bar_figure(categories, series, *, y_title, x_title="", title=None,
  text_format=".0f")``: ``series`` maps a legend name (e.g. a device) to one
  value per category (e.g. per run); ``None`` leaves a gap.
- ``stacked_bar_figure(rows, segments, *, x_title, colours=None, patterns=None,
  title=None, text_format=".1f")``: one horizontal bar per row, the first on
  top, stacked from ``segments`` (legend name -> one value per row) in their
  order; a segment keeps its colour (and fill pattern) in every row.

Bars with intervals and repeats (``IntervalBar``): ``lab.views.interval_bars``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

Trace = tuple[str, "np.ndarray | Sequence[float]", "np.ndarray | Sequence[float]"]

DEFAULT_MAX_POINTS = 2000
MAX_PANELS = 12  # small multiples draw at most this many panels
_HEIGHT = 380
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def reduce_trace(x, y, max_points: int = DEFAULT_MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` as float arrays with at most ``max_points`` points (min/max kept).

    Only the points kept are converted to float: a long series' draw costs its buckets, not
    its length (``lab.views.downsample``)."""
    xa = np.asarray(x)
    ya = np.asarray(y)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError(f"x and y must be 1-D and of equal length, got {xa.shape} and {ya.shape}")
    if max_points <= 0 or len(xa) <= max_points:
        return np.asarray(xa, dtype=float), np.asarray(ya, dtype=float)
    # Imported where needed: the reduction itself belongs to lab.views.downsample.
    from lab.views.downsample import keep_indices

    keep = keep_indices(ya, max_points)
    return np.asarray(xa[keep], dtype=float), np.asarray(ya[keep], dtype=float)


def _line(name: str, x, y, max_points: int, **kw) -> go.Scatter:
    rx, ry = reduce_trace(x, y, max_points)
    return go.Scatter(x=rx, y=ry, name=name, mode="lines", **kw)


def base_layout(fig: go.Figure, title: str | None, height: int = _HEIGHT) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=50, r=20, t=60 if title else 30, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        hovermode="x unified",
    )
    return fig


def line_figure(
    traces: Sequence[Trace],
    *,
    x_title: str,
    y_title: str,
    title: str | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    log_y: bool = False,
    x_is_time: bool = False,
    y_range: tuple[float, float] | None = None,
    distinct_dashes: bool = False,
) -> go.Figure:
    """Overlaid lines, each trace reduced to at most ``max_points`` points.

    ``x_is_time`` makes x a date axis; x is then given in milliseconds since the epoch (plotly's own
    convention; TensorBoard wall time x 1000). ``distinct_dashes`` gives each trace its own dash
    pattern, so lines that coincide (runs that compute the same steps) stay visible under each
    other."""
    fig = go.Figure()
    for i, (name, x, y) in enumerate(traces):
        rx, ry = reduce_trace(x, y, max_points)
        if x_is_time:
            rx = rx.astype("datetime64[ms]")
        line = (
            dict(dash=_DASHES[i % len(_DASHES)], width=2.5 if i == 0 else 2)
            if distinct_dashes
            else None
        )
        fig.add_trace(go.Scatter(x=rx, y=ry, name=name, mode="lines", line=line))
    fig.update_xaxes(title_text=x_title, type="date" if x_is_time else None)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else None)
    if y_range is not None:
        fig.update_yaxes(range=list(y_range))
    return base_layout(fig, title)


def spec_figure(spec: Any, *, title: bool = True) -> go.Figure:
    """``line_figure`` of a ``lab.views.text.ChartSpec``, with its title on the figure or not."""
    return line_figure(
        spec.traces,
        x_title=spec.x_title,
        y_title=spec.y_title,
        title=spec.title if title else None,
        x_is_time=spec.x_is_time,
        y_range=spec.y_range,
    )


def panels_note(count: int) -> str | None:
    """What ``timeline_figure`` says when it draws only ``MAX_PANELS`` of ``count`` panels."""
    if count <= MAX_PANELS:
        return None
    return f"showing {MAX_PANELS} of {count}: narrow the selection"


def timeline_figure(
    panels: Sequence[tuple[str, Sequence[Trace]]],
    *,
    y_title: str,
    x_title: str = "time (s)",
    title: str | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    y_range: tuple[float, float] | None = None,
    cols: int = 3,
) -> go.Figure:
    """One subplot per panel, side by side, sharing the y axis so heights compare.

    Typical use: a panel per run, a trace per GPU (``gpu0``, ``gpu1``...), y
    the utilisation in percent with ``y_range=(0, 100)``.
    """
    panels = list(panels)[:MAX_PANELS]  # a larger selection is capped; ``panels_note`` says so
    n = max(1, len(panels))
    ncols = max(1, min(cols, n))
    nrows = math.ceil(n / ncols)
    fig = make_subplots(
        rows=nrows,
        cols=ncols,
        shared_yaxes=True,
        subplot_titles=[p[0] for p in panels] or [""],
        horizontal_spacing=0.04,
        vertical_spacing=min(0.18, 0.9 / (nrows - 1)) if nrows > 1 else 0.1,
    )
    # One colour per trace name across panels, so gpu0 is the same colour in
    # every run and the legend lists it once.
    palette = _palette()
    colours: dict[str, str] = {}
    for i, (_, traces) in enumerate(panels):
        row, col = divmod(i, ncols)
        for name, x, y in traces:
            first = name not in colours
            colour = colours.setdefault(name, palette[len(colours) % len(palette)])
            fig.add_trace(
                _line(
                    name,
                    x,
                    y,
                    max_points,
                    line=dict(color=colour),
                    legendgroup=name,
                    showlegend=first,
                ),
                row=row + 1,
                col=col + 1,
            )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, col=1)
    if y_range is not None:
        fig.update_yaxes(range=list(y_range))
    fig = base_layout(fig, title, height=_HEIGHT * nrows if nrows > 1 else _HEIGHT)
    # Subplot titles sit where the legend would: lift the legend above them.
    fig.update_layout(
        hovermode="closest", legend=dict(y=1.0 + 0.16 / nrows), margin=dict(t=100 if title else 80)
    )
    return fig


def bar_figure(
    labels: Sequence[str],
    values: Sequence[float | None],
    *,
    y_title: str,
    title: str | None = None,
    text_format: str = ".1f",
) -> go.Figure:
    """One bar per label, the value printed on the bar."""
    vals = [none_if_nan(v) for v in values]
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=vals,
            text=[("" if v is None else format(v, text_format)) for v in vals],
            textposition="auto",
        )
    )
    fig.update_yaxes(title_text=y_title)
    fig = base_layout(fig, title)
    fig.update_layout(hovermode="closest", showlegend=False)
    return fig


def grouped_bar_figure(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    y_title: str,
    x_title: str = "",
    title: str | None = None,
    text_format: str = ".0f",
) -> go.Figure:
    """Bars grouped by category, one colour per series (e.g. per device)."""
    fig = go.Figure()
    for name, values in series.items():
        if len(values) != len(categories):
            raise ValueError(
                f"series {name!r} has {len(values)} values for {len(categories)} categories"
            )
        vals = [none_if_nan(v) for v in values]
        fig.add_trace(
            go.Bar(
                x=list(categories),
                y=vals,
                name=name,
                text=[("" if v is None else format(v, text_format)) for v in vals],
                textposition="auto",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    fig = base_layout(fig, title)
    fig.update_layout(hovermode="closest")
    return fig


def stacked_bar_figure(
    rows: Sequence[str],
    segments: Mapping[str, Sequence[float | None]],
    *,
    x_title: str,
    colours: Mapping[str, str] | None = None,
    patterns: Mapping[str, str] | None = None,
    title: str | None = None,
    text_format: str = ".1f",
) -> go.Figure:
    """Horizontal bars, one per row (first on top), each stacked from the segments in order.

    A segment with no value above zero in any row is left out of the figure
    and its legend; values too small for their text show it on hover only.
    """
    fig = go.Figure()
    for name, values in segments.items():
        if len(values) != len(rows):
            raise ValueError(f"segment {name!r} has {len(values)} values for {len(rows)} rows")
        vals = [none_if_nan(v) for v in values]
        if not any(v for v in vals):
            continue
        marker: dict[str, Any] = {"color": (colours or {}).get(name)}
        if (patterns or {}).get(name):
            # hatched on white, outlined in the colour: the same hue as its solid sibling, visibly
            # apart
            marker["pattern"] = {
                "shape": patterns[name],
                "fillmode": "overlay",
                "fgcolor": marker["color"],
            }
            marker["line"] = {"color": marker["color"], "width": 1}
            marker["color"] = "rgba(255,255,255,0)"
        fig.add_trace(
            go.Bar(
                y=list(rows),
                x=vals,
                name=name,
                orientation="h",
                marker=marker,
                text=[("" if not v else format(v, text_format)) for v in vals],
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                hovertemplate=f"{name}: %{{x:{text_format}}}<extra>%{{y}}</extra>",
            )
        )
    fig.update_layout(barmode="stack", uniformtext=dict(minsize=9, mode="hide"))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=list(rows))
    fig = base_layout(fig, title, height=max(_HEIGHT // 2, 110 + 34 * len(rows)))
    # stacked bars list it reversed
    fig.update_layout(hovermode="closest", legend=dict(traceorder="normal"))
    return fig


def none_if_nan(v: float | None) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _palette() -> list[str]:
    import plotly.colors

    return list(plotly.colors.qualitative.Plotly)
