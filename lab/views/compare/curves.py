"""A ``Comparison``'s charts: each run's curve of a tag against step, samples seen or wall time, its
device timelines from ``sys/`` events (as the Live page draws them), throughput and speedup by
mode (``lab.views.compare.bars``) and bars of the table's peak memory; with their captions and the
choices the page offers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lab import tags
from lab.runfolder import parse_time
from lab.views import charts
from lab.views.compare import anatomy, bars
from lab.views.compare.comparison import Comparison
from lab.views.compare.figures import global_batch
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.table import PEAK_PREFIX, frame
from lab.views.live.run_charts import SYS_METRICS, sys_traces
from lab.views.runscalars import SYS_PREFIX

CURVE_TAGS = [tags.TRAIN_LOSS, tags.VAL_LOSS, tags.TRAIN_ACC, tags.VAL_ACC]
X_AXES = {"step": "optimizer step", "samples": "samples seen", "wall": "wall time since start (s)"}
# what the page offers: key -> label
SYSTEM_METRICS = {k: SYS_METRICS[k].label for k in ("util", "mem", "pcie_rx", "nvlink_rx")}

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


def curve_tags(scalars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The curves the page offers: ``CURVE_TAGS``, then every other tag the runs log (a script names
    its own)."""
    own = sorted(
        {
            t
            for sc in scalars.values()
            for t, s in (sc or {}).items()
            if not t.startswith(SYS_PREFIX) and len(s.value)
        }
        - set(CURVE_TAGS)
    )
    return CURVE_TAGS + own


BARS_NOTE = (
    "A bar per mode and device count, in the colours of the cards above: the median over its runs, "
    "the whisker its interval (throughput: one run's windows, within-run only; several runs: the "
    "order-statistics interval of their medians, its coverage in the hover; speedup: the card's "
    "interval over the pairs of runs); with repeats, each run is a dot over its bar."
)

NO_SAMPLES_NOTE = (
    "None of these runs has system samples (sys/ events): the dashboard records them while it "
    "supervises a run, so runs started by hand have none."
)


def _x(run: CompareRun, ser: Any, x: str) -> np.ndarray | None:
    """The x of one run's series: its steps, samples seen, or seconds since the trainer started."""
    if x == "step":
        return np.asarray(ser.step, dtype=float)
    if x == "samples":
        gb = global_batch(run)
        return np.asarray(ser.step, dtype=float) * float(gb) if gb else None
    wt = np.asarray(ser.wall_time, dtype=float)
    started = parse_time((run.summary or {}).get("started_at"))
    t0 = started.timestamp() if started else None
    if t0 is None or t0 > wt[0]:
        t0 = float(wt[0])
    return wt - t0


def curve_traces(
    runs: Sequence[CompareRun],
    scalars: Mapping[str, Mapping[str, Any]],
    tag: str = tags.TRAIN_LOSS,
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
        xs = _x(r, ser, x)
        if xs is not None:
            out.append((names[r.key], xs, np.asarray(ser.value, dtype=float)))
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
    """GPU utilisation (``metric="util"``) or memory (``"mem"``) per GPU and run from ``sys/``
    events.

    Runs without GPU samples (CPU runs) show ``sys/cpu_pct`` or ``sys/rss_mib``
    instead, and ``note`` says so. Time counts from each run's first sample.
    """
    m = SYS_METRICS[metric]
    names = labels(runs)
    panels = []
    used_cpu = used_gpu = False
    for r in runs:
        traces, on_cpu = sys_traces(scalars.get(r.key) or {}, metric)
        used_cpu |= bool(traces) and on_cpu
        used_gpu |= bool(traces) and not on_cpu
        panels.append((names[r.key], traces))
    gpu_only = used_gpu and not used_cpu
    y_title = f"{m.gpu_title if gpu_only else m.label} ({m.unit})"
    note = None
    if used_cpu:
        note = (
            f"No GPU samples for {'some of ' if used_gpu else ''}these runs (CPU runs): "
            f"showing {m.cpu_tag} ({m.cpu_what}) instead."
        )
    if not any(p[1] for p in panels):
        note = NO_SAMPLES_NOTE
    return SystemPanels(panels, y_title, None if used_cpu else m.y_range, note)


def curve_figure(
    runs: Sequence[CompareRun],
    scalars,
    *,
    tag: str = tags.TRAIN_LOSS,
    x: str = "step",
    max_points: int = charts.DEFAULT_MAX_POINTS,
) -> go.Figure:
    """``tag`` of every run overlaid against step, samples seen or wall time."""
    return charts.line_figure(
        curve_traces(runs, scalars, tag=tag, x=x),
        x_title=X_AXES[x],
        y_title=tag,
        max_points=max_points,
        distinct_dashes=True,
    )


def memory_figure(table: pd.DataFrame) -> go.Figure:
    """Peak memory per device, grouped by run (a device per colour)."""
    cols = [c for c in table.columns if c.startswith(PEAK_PREFIX)]
    series = {c[len(PEAK_PREFIX) :]: list(table[c]) for c in cols}
    return charts.grouped_bar_figure(list(table["run"]), series, y_title="peak MiB")


def system_figure(
    runs: Sequence[CompareRun],
    scalars,
    *,
    metric: str = "util",
    max_points: int = charts.DEFAULT_MAX_POINTS,
) -> tuple[go.Figure, str | None]:
    """Per-run timelines side by side from ``sys/`` events, and a note when they show the CPU."""
    sp = system_panels(runs, scalars, metric=metric)
    fig = charts.timeline_figure(
        sp.panels, y_title=sp.y_title, y_range=sp.y_range, max_points=max_points
    )
    capped = charts.panels_note(len(sp.panels))
    return fig, " ".join(x for x in (capped, sp.note) if x) or None


def comparison_figures(
    c: Comparison,
    scalars,
    *,
    tag: str = tags.TRAIN_LOSS,
    x: str = "step",
    metric: str = "util",
) -> list[tuple[str, go.Figure, str | None]]:
    """Every chart of a comparison as ``(caption, figure, note or None)``, in page order;
    ``scalars``: each run's event series by key (a resumed run's joined to the runs it continues,
    when the page asks)."""
    runs, table = c.runs, frame(c)
    sys_fig, note = system_figure(runs, scalars, metric=metric)
    return [
        (
            f"{tag} against {X_AXES[x]}",
            curve_figure(runs, scalars, tag=tag, x=x),
            STEP_NOTE if x == "step" else None,
        ),
        ("Throughput by mode", bars.throughput_figure(c), BARS_NOTE),
        ("Speedup by mode", bars.speedup_figure(c), None),
        ("Peak memory per device", memory_figure(table), None),
        (f"{SYSTEM_METRICS[metric].capitalize()} over time, run by run", sys_fig, note),
    ]


def anatomy_figures(c: Comparison) -> list[tuple[str, go.Figure, str | None]]:
    """The anatomy bars as ``[(caption, figure, note)]``, the note being their intro and reading;
    [] when no run was profiled."""
    fig = anatomy.figure(c.profiles)
    if fig is None:
        return []
    return [(anatomy.CAPTION, fig, " ".join([anatomy.INTRO, *c.anatomy]))]
