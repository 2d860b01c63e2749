"""Bars that carry their uncertainty: each bar a median with its interval as an error bar (the hover
says what interval and its coverage) and, when it folds several runs, each run as a dot over it;
one colour and one legend entry per group (a mode, on the Compare page). Labels wrap onto lines
(``wrap_label``), never cut off.

- ``IntervalBar``: one bar: label, value, interval, colour, group, dots, hover.
- ``interval_bar_figure(bars, *, y_title, reference=None, title=None, text_format=".0f")``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from lab.views.charts import base_layout, none_if_nan

LABEL_WIDTH = 18  # characters per line of a bar's label


@dataclass(frozen=True)
class IntervalBar:
    """One bar: its value and interval (None: unknown), its colour and legend group, the values
    folded into it (drawn as dots when there are several) and what hovering over it says."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    colour: str
    group: str
    dots: tuple[float, ...] = ()
    hover: str = ""


# a word, with the hyphens, underscores or slashes after it (a line may break after them); spaces
_PIECES = re.compile(r"[^\s\-_/]+[\-_/]*|[\-_/]+|\s+")


def wrap_label(label: str, width: int = LABEL_WIDTH) -> str:
    """``label`` on lines of about ``width`` characters (``<br>`` between): broken at spaces, or
    after a hyphen, underscore or slash; a longer word stays whole. No character is dropped but the
    spaces a break replaces."""
    lines: list[str] = []
    line = ""
    for piece in _PIECES.findall(label):
        if piece.isspace():
            line += " " if line else ""
        elif line and len(line.rstrip()) + len(piece) > width:
            lines.append(line.rstrip())
            line = piece
        else:
            line += piece
    return "<br>".join([*lines, line.rstrip()]) if lines or line.strip() else label


def _error(bars: Sequence[IntervalBar]) -> dict[str, Any]:
    """The bars' intervals as an asymmetric error bar; None where a bar has no interval."""
    up: list[float | None] = []
    down: list[float | None] = []
    for b in bars:
        v, lo, hi = none_if_nan(b.value), none_if_nan(b.low), none_if_nan(b.high)
        known = v is not None and lo is not None and hi is not None
        up.append(hi - v if known else None)
        down.append(v - lo if known else None)
    return dict(type="data", symmetric=False, array=up, arrayminus=down, visible=True)


def _dots(group: str, mine: list[tuple[str, IntervalBar]], text_format: str) -> go.Scatter | None:
    """The repeats of the group's bars that fold several, as dots over their bar."""
    dots = [(t, d) for t, b in mine if len(b.dots) > 1 for d in b.dots]
    if not dots:
        return None
    return go.Scatter(
        x=[t for t, _ in dots],
        y=[d for _, d in dots],
        mode="markers",
        name=f"{group}: repeats",
        marker=dict(color="white", size=8, line=dict(color="black", width=1.5)),
        legendgroup=group,
        showlegend=False,
        hovertemplate=f"{group}: %{{y:{text_format}}}<extra>a repeat</extra>",
    )


def interval_bar_figure(
    bars: Sequence[IntervalBar],
    *,
    y_title: str,
    reference: float | None = None,
    title: str | None = None,
    text_format: str = ".0f",
) -> go.Figure:
    """One bar per ``IntervalBar`` in the given order, its interval as an error bar, its repeats as
    dots; a trace (one colour, one legend entry) per group; ``reference`` draws a dotted line across
    (1.0 for a speedup). Labels wrap instead of being cut; the axes make room for them."""
    fig = go.Figure()
    ticks = [wrap_label(b.label) for b in bars]
    for group in dict.fromkeys(b.group for b in bars):
        mine = [(t, b) for t, b in zip(ticks, bars) if b.group == group]
        values = [none_if_nan(b.value) for _, b in mine]
        fig.add_trace(
            go.Bar(
                x=[t for t, _ in mine],
                y=values,
                name=group,
                marker=dict(color=mine[0][1].colour),
                error_y=_error([b for _, b in mine]),
                text=[("" if v is None else format(v, text_format)) for v in values],
                textposition="inside",
                insidetextanchor="start",
                hovertext=[b.hover or b.label for _, b in mine],
                hoverinfo="text",
                legendgroup=group,
            )
        )
        dots = _dots(group, mine, text_format)
        if dots is not None:
            fig.add_trace(dots)
    if reference is not None:
        fig.add_hline(y=reference, line_dash="dot", line_color="grey")
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=ticks, automargin=True)
    fig.update_yaxes(title_text=y_title, automargin=True, rangemode="tozero")
    fig = base_layout(fig, title)
    fig.update_layout(hovermode="closest", barmode="overlay")
    return fig
