"""How a device-count sweep scales, drawn: throughput against device count per mode with its
interval, the ideal line (N times the single baseline: perfect scaling, strong or weak, in samples
or steps per second), efficiency against device count, and the seeds' table (rows: device counts;
columns: modes; cells: throughput with its interval and the efficiency). All read from
``Comparison.scaling_curve``; nothing when no mode ran at several counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from lab.views.charts import base_layout
from lab.views.compare import modes
from lab.views.compare.comparison import Comparison

THROUGHPUT_CAPTION = "Throughput against device count"
EFFICIENCY_CAPTION = "Scaling efficiency against device count"
IDEAL = "ideal (N × single)"


def _by_mode(curve: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for point in curve:
        out.setdefault(point["mode"], []).append(point)
    return {m: sorted(ps, key=lambda p: p["devices"]) for m, ps in out.items()}


def _rate(curve: Sequence[dict[str, Any]]) -> str:
    return str(curve[0].get("rate") or "samples/s") if curve else "samples/s"


def _mode_lines(fig: go.Figure, curve: Sequence[dict[str, Any]], key: str, centre: str) -> None:
    """One line per mode (its colour) of each point's ``key`` figure at ``centre``, its
    interval as an error bar."""
    for mode, points in _by_mode(curve).items():
        shown = [p for p in points if p[key]]
        figs = [p[key] for p in shown]
        fig.add_trace(
            go.Scatter(
                x=[p["devices"] for p in shown],
                y=[f[centre] for f in figs],
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[f["ci_high"] - f[centre] for f in figs],
                    arrayminus=[f[centre] - f["ci_low"] for f in figs],
                ),
                mode="lines+markers",
                name=mode,
                line=dict(color=modes.colour(mode)),
            )
        )


def _axes(fig: go.Figure, curve: Sequence[dict[str, Any]], x: str, y: str) -> go.Figure:
    base_layout(fig, None)
    fig.update_layout(hovermode="closest")
    fig.update_xaxes(title=x, tickvals=sorted({p["devices"] for p in curve}))
    fig.update_yaxes(title=y, rangemode="tozero")
    return fig


def throughput_figure(curve: Sequence[dict[str, Any]]) -> go.Figure:
    """Throughput per mode with its interval, and the ideal line from the (single, 1) point when
    there is one."""
    fig = go.Figure()
    _mode_lines(fig, curve, "throughput", "median")
    base = next((p for p in curve if (p["mode"], p["devices"]) == ("single", 1)), None)
    counts = sorted({p["devices"] for p in curve})
    if base and base["throughput"] and counts:
        one = base["throughput"]["median"]
        fig.add_trace(
            go.Scatter(
                x=counts,
                y=[one * n for n in counts],
                mode="lines",
                name=IDEAL,
                line=dict(color="#555", dash="dot"),
            )
        )
    return _axes(fig, curve, "devices (GPUs, or DDP processes on the CPU)", _rate(curve))


def efficiency_figure(curve: Sequence[dict[str, Any]]) -> go.Figure:
    """Speedup / devices per mode, with the interval, against a line at 1 (perfect)."""
    fig = go.Figure()
    _mode_lines(fig, curve, "efficiency", "value")
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
    return _axes(fig, curve, "devices", "efficiency (speedup / devices)")


def _cell(point: dict[str, Any]) -> str:
    tp, eff = point["throughput"], point["efficiency"]
    if not tp:
        return "–"
    text = f"{tp['median']:.1f} ({tp['ci_low']:.1f}–{tp['ci_high']:.1f})"
    return f"{text}, {eff['value']:.0%} efficient" if eff else text


def table(curve: Sequence[dict[str, Any]]) -> pd.DataFrame | None:
    """The seeds' table: a row per device count, a column per mode."""
    if not curve:
        return None
    by_mode = _by_mode(curve)
    rows = []
    for n in sorted({p["devices"] for p in curve}):
        row: dict[str, Any] = {"devices": n}
        for mode, points in by_mode.items():
            here = next((p for p in points if p["devices"] == n), None)
            row[f"{mode} ({_rate(curve)})"] = _cell(here) if here else ""
        rows.append(row)
    return pd.DataFrame(rows)


def figures(c: Comparison) -> list[tuple[str, go.Figure]]:
    """(caption, figure) of the throughput and efficiency charts; empty without a curve."""
    curve = list(c.scaling_curve)
    if not curve:
        return []
    return [
        (THROUGHPUT_CAPTION, throughput_figure(curve)),
        (EFFICIENCY_CAPTION, efficiency_figure(curve)),
    ]
