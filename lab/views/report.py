"""The comparison's curves and charts, and the comparison as one standalone HTML file.

This module owns what the Compare page and the export draw: the curves of
each run against step, samples seen or wall time (``curve_traces``), the
per-run system timelines from ``sys/`` events (``system_panels``), the
figures built from them and from ``lab.views.compare``'s table with ``lab.views.charts``
(``comparison_figures``), and the export a user can attach to a report
(``build_html``): the table, the fairness warnings, the charts
(plotly figures with plotly.js embedded inline, once, so the file opens with
no server and no internet), the "how to read this" text, and when and where
each run was recorded. It builds a string; the page offers it for download.
"""
from __future__ import annotations

import html
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lab.runfolder import parse_time
from lab.views import charts
from lab.views.compare import PEAK_PREFIX, CompareRun, FairnessWarning, device_order, labels, run_metrics

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
how fast each mode gets to a given loss. Runs with the same seed and global
batch compute the same steps in every mode, so their lines lie on top of each
other at first (each run has its own dash pattern); the column *loss matches
baseline to step* says for how long they agree within 0.1%. After that, float
rounding differences between reduction orders grow with training and the
curves drift apart while following the same trend: expected, not a bug."""

SYSTEM_CAPTIONS = {"util": "Utilisation", "mem": "Memory"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.5rem 1rem;margin:.5rem 0}
.meta{color:#555;font-size:.85rem}
"""


# ---- curve and timeline data ------------------------------------------------

X_AXES = {"step": "optimizer step", "samples": "samples seen", "wall": "wall time since start (s)"}


def _parse_time(text: Any) -> float | None:
    dt = parse_time(text)
    return None if dt is None else dt.timestamp()


def curve_traces(
    runs: Sequence[CompareRun],
    scalars: Mapping[str, Mapping[str, Any]],
    tag: str = "train/loss",
    x: str = "step",
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """One ``(label, x, y)`` per run that logged ``tag``, x being step, samples seen or wall time.

    Samples seen = step x global batch. Wall time counts from the trainer's
    ``started_at`` in summary.json, else from the first event of the tag.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    names = labels(runs)
    out = []
    for r in runs:
        ser = (scalars.get(r.key) or {}).get(tag)
        if ser is None or len(ser.value) == 0:
            continue
        y = np.asarray(ser.value, dtype=float)
        if x == "step":
            xs = np.asarray(ser.step, dtype=float)
        elif x == "samples":
            gb = run_metrics(r)["global batch"]
            if not gb:
                continue
            xs = np.asarray(ser.step, dtype=float) * float(gb)
        else:
            wt = np.asarray(ser.wall_time, dtype=float)
            t0 = _parse_time((r.summary or {}).get("started_at"))
            if t0 is None or t0 > wt[0]:
                t0 = float(wt[0])
            xs = wt - t0
        out.append((names[r.key], xs, y))
    return out


@dataclass(frozen=True)
class SystemPanels:
    """Per-run system timelines ready for ``charts.timeline_figure``."""

    panels: list
    y_title: str
    y_range: tuple[float, float] | None
    note: str | None


def system_panels(
    runs: Sequence[CompareRun],
    scalars: Mapping[str, Mapping[str, Any]],
    metric: str = "util",
) -> SystemPanels:
    """GPU utilisation (``metric="util"``) or memory (``"mem"``) per GPU and run from ``sys/`` events.

    Runs without GPU samples (CPU runs) show ``sys/cpu_pct`` or ``sys/rss_mib``
    instead, and ``note`` says so. Time counts from each run's first sample.
    """
    gpu_leaf, cpu_tag = {"util": ("util_pct", "sys/cpu_pct"), "mem": ("mem_used_mib", "sys/rss_mib")}[metric]
    names = labels(runs)
    panels = []
    used_cpu = used_gpu = False
    for r in runs:
        sc = scalars.get(r.key) or {}
        gpu_tags = sorted(
            (t for t in sc if t.startswith("sys/gpu") and t.endswith("/" + gpu_leaf) and len(sc[t].value)),
            key=lambda t: device_order(t.split("/")[1]),
        )
        chosen = [(t.split("/")[1], sc[t]) for t in gpu_tags]
        if not chosen and cpu_tag in sc and len(sc[cpu_tag].value):
            chosen = [("cpu (process tree)", sc[cpu_tag])]
            used_cpu = True
        elif chosen:
            used_gpu = True
        traces = []
        t0 = min((float(s.wall_time[0]) for _, s in chosen), default=0.0)
        for name, s in chosen:
            traces.append((name, np.asarray(s.wall_time, dtype=float) - t0, np.asarray(s.value, dtype=float)))
        panels.append((names[r.key], traces))
    if metric == "util":
        y_title = "GPU utilisation (%)" if used_gpu and not used_cpu else "utilisation (%)"
        y_range = (0.0, 100.0) if not used_cpu else None
    else:
        y_title = "GPU memory used (MiB)" if used_gpu and not used_cpu else "memory (MiB)"
        y_range = None
    note = None
    if used_cpu:
        what = "sys/cpu_pct (CPU use of the run's whole process tree; 100 % = one core)" if metric == "util" \
            else "sys/rss_mib (resident memory of the run's whole process tree)"
        note = f"No GPU samples for {'some of ' if used_gpu else ''}these runs (CPU runs): showing {what} instead."
    if not any(p[1] for p in panels):
        note = ("None of these runs has system samples (sys/ events): the dashboard records them while it "
                "supervises a run, so runs started by hand have none.")
    return SystemPanels(panels, y_title, y_range, note)


# ---- figures ---------------------------------------------------------------

def curve_figure(runs: Sequence[CompareRun], scalars, *, tag: str = "train/loss", x: str = "step",
                 max_points: int = charts.DEFAULT_MAX_POINTS) -> go.Figure:
    """``tag`` of every run overlaid against step, samples seen or wall time."""
    return charts.line_figure(curve_traces(runs, scalars, tag=tag, x=x), x_title=X_AXES[x],
                              y_title=tag, max_points=max_points, distinct_dashes=True)


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


# ---- the standalone HTML -------------------------------------------------------

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
