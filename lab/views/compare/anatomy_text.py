"""The anatomy of a step as the Compare page and the HTML export show it: the bars' figure and their
reading.

Owns the figure of ``lab.views.compare.anatomy``'s bars (one row per bar, the same
colours for every run, through ``lab.views.charts.stacked_bar_figure``) and
the sentences that explain it with each run's own numbers, e.g. "DDP waits
3.1 ms per step on all-reduce, 18% of its step", DataParallel's scatter,
replicate and gather, a straggling rank, and which runs were not profiled.
Tested by tests/test_anatomy.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from lab.views import charts
from lab.views.compare import anatomy
from lab.views.compare.runs import CompareRun, labels

CAPTION = "Anatomy of a step"
INTRO = (
    "Milliseconds per step over each profiled run's window of steps (its breakdown.json). A run's "
    "phases "
    "add up to its step (DataParallel's scatter, replicate and gather drawn out of its forward). "
    "Its "
    "communication bar runs at the same time as those phases: the hatched part ran "
    "hidden behind computation (DDP all-reduces gradient buckets while backward goes on), the "
    "solid part is "
    "time the step waited for it. On the CPU the waited-for part is an upper bound: idle Python "
    "between "
    "operations counts as waiting."
)
NOT_PROFILED = (
    "Not profiled: {names}. Launch with Profile steps (e.g. 20:25) to see where their steps go."
)


def profiled(runs: Sequence[CompareRun]) -> list[tuple[CompareRun, dict]]:
    """The runs that have a breakdown.json, with it, in the order given."""
    found = [(r, anatomy.breakdown(r.run_dir, r.summary)) for r in runs]
    return [(r, data) for r, data in found if data]


def row_label(name: str, bar: anatomy.Bar) -> str:
    """How a bar's row is named: the run, its communication, or its slowest rank."""
    if bar.kind == "comm":
        return f"{name} · communication"
    if bar.kind == "slowest":
        return f"{name} · rank {bar.rank} (slowest)"
    return name


def figure(runs: Sequence[CompareRun]) -> go.Figure | None:
    """The stacked bars of every profiled run (None when none was profiled)."""
    names = labels(runs)
    bars = [b for r, data in profiled(runs) for b in anatomy.run_bars(r.key, data)]
    if not bars:
        return None
    rows = [row_label(names[b.key], b) for b in bars]
    segs = anatomy.SEGMENTS
    values = {segs[k].name: [b.ms.get(k) for b in bars] for k in segs}
    return charts.stacked_bar_figure(
        rows,
        values,
        x_title="ms per step",
        colours={s.name: s.colour for s in segs.values()},
        patterns={s.name: s.pattern for s in segs.values() if s.pattern},
    )


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "–"


def _mode_sentence(name: str, data: Mapping[str, Any]) -> str:
    step, p = float(data["step_ms"]), data.get("phases_ms") or {}
    seg, comm = anatomy.step_segments(p), anatomy.comm_segments(p)
    exposed, hidden = comm["comm_exposed"], comm["comm_hidden"]
    mode, world = data.get("effective_mode"), data.get("world_size") or 1
    dp = sum(seg[k] for k in anatomy.DP_PHASES)
    if mode == "ddp":
        text = (
            f"**{name}** (DDP, {world} ranks) waits {exposed:.1f} ms per step on all-reduce, "
            f"{_pct(exposed, step)} of its {step:.1f} ms step"
        )
        return text + (
            f"; another {hidden:.1f} ms of all-reduce ran hidden behind backward"
            if hidden >= 0.05
            else ""
        )
    if mode == "dp" and dp > 0:
        text = (
            f"**{name}** (DataParallel over {world} devices) spends {seg['dp_scatter']:.1f} ms "
            "per step "
            f"scattering the batch, {seg['dp_replicate']:.1f} ms replicating the model and "
            f"{seg['dp_gather']:.1f} ms gathering the outputs on device 0: {_pct(dp, step)} of its "
            f"{step:.1f} ms step, all from one Python process"
        )
        return text + (f"; it waits {exposed:.1f} ms on communication" if exposed >= 0.05 else "")
    if exposed + hidden > 0:
        return (
            f"**{name}** waits {exposed:.1f} ms per step on communication, {_pct(exposed, step)} "
            "of its "
            f"{step:.1f} ms step"
        )
    return (
        f"**{name}** communicates nothing: of its {step:.1f} ms step, forward takes "
        f"{seg['forward']:.1f} ms, "
        f"backward {seg['backward']:.1f} ms and the optimizer {seg['optimizer']:.1f} ms"
    )


def sentence(name: str, data: Mapping[str, Any]) -> str:
    """One profiled run read aloud with its own numbers, its note and its straggler included."""
    text = _mode_sentence(name, data)
    if data.get("note"):
        text += f" ({str(data['note']).rstrip('.')})"
    text += "."
    found = anatomy.straggler(data)
    if found:
        slow, fast, spread = found
        text += (
            f" Its ranks differ: rank {slow.get('rank')} computes {anatomy.busy_ms(slow):.1f} ms "
            "per step "
            f"against {anatomy.busy_ms(fast):.1f} ms on rank {fast.get('rank')} ({spread:.0%} "
            "longer), and "
            "the others wait for it at every all-reduce: its bar is drawn beside."
        )
    return text


def explain(runs: Sequence[CompareRun]) -> list[str]:
    """The bars read with these runs' numbers: one sentence per profiled run, then those not
    profiled."""
    names = labels(runs)
    found = profiled(runs)
    out = [sentence(names[r.key], data) for r, data in found]
    missing = [names[r.key] for r in runs if r.key not in {f.key for f, _ in found}]
    if found and missing:
        out.append(NOT_PROFILED.format(names=", ".join(missing)))
    return out


def anatomy_figures(runs: Sequence[CompareRun]) -> list[tuple[str, go.Figure, str | None]]:
    """``[(caption, figure, note)]`` for the export, the note being the intro and the reading; []
    unprofiled."""
    fig = figure(runs)
    if fig is None:
        return []
    return [(CAPTION, fig, " ".join([INTRO, *explain(runs)]))]
