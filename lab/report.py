"""The comparison's figures, and the comparison as one standalone HTML file.

This module owns the charts of a comparison (built from ``lab.compare``'s
figures with ``lab.charts``; the Compare page draws the same ones) and the
export a user can attach to a report: the table, the fairness warnings, the charts
(plotly figures with plotly.js embedded inline, once, so the file opens with
no server and no internet), the "how to read this" text, and when and where
each run was recorded. It builds a string; the page offers it for download.
"""
from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from datetime import datetime, timezone

import pandas as pd
import plotly.graph_objects as go

from lab import charts
from lab.compare import PEAK_PREFIX, CompareRun, FairnessWarning, X_AXES, curve_traces, labels, system_panels

log = logging.getLogger(__name__)

HOW_TO_READ = """\
**Speedup** is a run's steady-state throughput (samples per second, without the
warm-up steps) divided by the baseline's. **Scaling efficiency** is the speedup
divided by the number of devices (relative to the baseline's): 1.0 means every
added device paid for itself fully, 0.5 means half of it went to communication,
waiting or a bottleneck such as DataParallel's single process. **Memory
imbalance** is (max − min) / mean of the per-device peak memory: DataParallel
keeps the model, the outputs and the loss on the first device, so its first
device holds more (imbalance well above 0), while DDP's ranks hold about the
same (close to 0). Steady throughput and memory are only comparable between
runs of the same model, dataset, global batch and precision: the warnings say
when they are not."""

STEP_NOTE = """\
Overlaying loss against the *step* is fair only when the runs use the same
global batch: one step of a run with twice the batch sees twice the data.
Use *samples seen* to compare learning per example, and *wall time* to compare
how fast each mode gets to a given loss."""

SYSTEM_CAPTIONS = {"util": "Utilisation", "mem": "Memory"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.5rem 1rem;margin:.5rem 0}
.meta{color:#555;font-size:.85rem}
"""


def _md(text: str) -> str:
    """The two bits of markdown our texts use (**bold**, *italic*), as escaped HTML."""
    out = html.escape(text)
    parts = out.split("**")
    out = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("*")
    return "".join(f"<i>{p}</i>" if i % 2 else p for i, p in enumerate(parts))


def build_html(
    *,
    runs: Sequence[CompareRun],
    table: pd.DataFrame,
    warnings: Sequence[FairnessWarning],
    figures: Sequence[tuple[str, go.Figure, str | None]],
    baseline_label: str | None = None,
    title: str = "Parallel Training Lab — run comparison",
    generated_at: datetime | None = None,
) -> str:
    """A complete HTML document with everything inline (plotly.js included once)."""
    generated_at = generated_at or datetime.now(timezone.utc)
    names = labels(runs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">Generated {html.escape(generated_at.isoformat(timespec="seconds"))}'
        + (f" · baseline: {html.escape(baseline_label)}" if baseline_label else "")
        + "</p>",
        "<h2>Runs</h2><ul>",
    ]
    for r in runs:
        where = r.recorded_on or r.host or "unknown machine"
        parts.append(
            f"<li><b>{html.escape(names[r.key])}</b> ({html.escape(r.run_id)}): recorded "
            f"{html.escape(r.created_at or 'at an unknown time')} on {html.escape(str(where))}"
            + (f", state {html.escape(r.state)}" if r.state else "")
            + "</li>"
        )
    parts.append("</ul>")
    if warnings:
        parts.append("<h2>Fairness warnings</h2>")
        parts += [f'<div class="warn">{html.escape(w.message)}</div>' for w in warnings]
    parts.append("<h2>Table</h2>")
    parts.append(table.to_html(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}", escape=True))
    parts.append("<h2>How to read this</h2>")
    parts += [f"<p>{_md(p)}</p>" for p in (HOW_TO_READ, STEP_NOTE)]
    first = True
    for caption, fig, note in figures:
        parts.append(f"<h2>{html.escape(caption)}</h2>")
        if note:
            parts.append(f'<p class="meta">{html.escape(note)}</p>')
        # plotly.js (about 4 MB) goes in once, with the first figure; the others use it.
        parts.append(fig.to_html(full_html=False, include_plotlyjs=True if first else False))
        first = False
    parts.append("</body></html>")
    return "\n".join(parts)


def curve_figure(runs: Sequence[CompareRun], scalars, *, tag: str = "train/loss", x: str = "step",
                 max_points: int = charts.DEFAULT_MAX_POINTS) -> go.Figure:
    """``tag`` of every run overlaid against step, samples seen or wall time."""
    return charts.line_figure(curve_traces(runs, scalars, tag=tag, x=x), x_title=X_AXES[x],
                              y_title=tag, max_points=max_points)


def throughput_figure(table: pd.DataFrame) -> go.Figure:
    """Steady-state throughput per run, as bars."""
    return charts.bar_figure(list(table["run"]), list(table["throughput (samples/s)"]),
                             y_title="samples/s (steady state)", text_format=".0f")


def memory_figure(table: pd.DataFrame) -> go.Figure:
    """Peak memory per device, grouped by run (a device per colour)."""
    cols = [c for c in table.columns if c.startswith(PEAK_PREFIX)]
    series = {c[len(PEAK_PREFIX):]: list(table[c]) for c in cols}
    return charts.grouped_bar_figure(list(table["run"]), series, y_title="peak MiB")


def system_figure(runs: Sequence[CompareRun], scalars, *, metric: str = "util",
                  max_points: int = charts.DEFAULT_MAX_POINTS) -> tuple[go.Figure, str | None]:
    """Per-run timelines side by side from ``sys/`` events, and a note when they show the CPU."""
    sp = system_panels(runs, scalars, metric=metric)
    fig = charts.timeline_figure(sp.panels, y_title=sp.y_title, y_range=sp.y_range,
                                 max_points=max_points)
    return fig, sp.note


def comparison_figures(runs: Sequence[CompareRun], table: pd.DataFrame, scalars, *, tag: str = "train/loss",
                       x: str = "step", metric: str = "util") -> list[tuple[str, go.Figure, str | None]]:
    """Every chart of a comparison as ``(caption, figure, note or None)``, in page order."""
    sys_fig, note = system_figure(runs, scalars, metric=metric)
    return [
        (f"{tag} against {X_AXES[x]}", curve_figure(runs, scalars, tag=tag, x=x), STEP_NOTE if x == "step" else None),
        ("Throughput", throughput_figure(table), None),
        ("Peak memory per device", memory_figure(table), None),
        (f"{SYSTEM_CAPTIONS[metric]} over time, run by run", sys_fig, note),
    ]
