"""A ``Comparison``'s throughput and speedup as bars grouped by mode, in the modes' colours
(``lab.views.compare.modes``): one bar per mode and device count (the headline's cards), the median
over its runs with its interval as an error bar (one run: its own windows' interval, within-run
only; several: the order-statistics interval of the median of their medians, its coverage named),
and each run as a dot over its bar when the mode has repeats. The speedup bars are exactly the
cards (their interval over the pairs of runs); a group with no card has no speedup bar.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import plotly.graph_objects as go

from lab.engine.spec.modes import MODES
from lab.views.compare import modes
from lab.views.compare.comparison import Comparison, Row
from lab.views.compare.headline import Card, mode_of
from lab.views.compare.naming import few
from lab.views.compare.scaling_curve import pooled
from lab.views.interval_bars import IntervalBar, interval_bar_figure

THROUGHPUT_TITLE = "throughput (samples/s, steady state)"
SPEEDUP_TITLE = "speedup against the baseline"
_ORDER = MODES


def group_label(mode: str, devices: int) -> str:
    """A bar's label, as its card's: ``"ddp on 2 devices"``."""
    return f"{mode} on {devices} device{'s' * (devices != 1)}"


def _order(key: tuple[str, int]) -> tuple:
    """single, dp, ddp, fsdp (each before its weak variant), then other modes by name; then
    devices."""
    mode, devices = key
    base = mode.removesuffix(modes.WEAK_SUFFIX)
    rank = _ORDER.index(base) if base in _ORDER else len(_ORDER)
    return (rank, base, mode != base, devices)


def _groups(c: Comparison, rows: Sequence[Row]) -> dict[tuple[str, int], list[Row]]:
    """The rows by their comparison group (``groups.Group``: its shown mode and device count)."""
    out: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        g = c.group_of(r.key)
        key = (g.mode, g.devices) if g else (mode_of(r), r.figures.device_count)
        out.setdefault(key, []).append(r)
    return dict(sorted(out.items(), key=lambda kv: _order(kv[0])))


def _hover(label: str, rows: Sequence[Row], figure: str) -> str:
    who = few([r.name for r in rows])
    return f"{label}: {figure}<br>{len(rows)} run{'s' * (len(rows) != 1)}: {who}"


def _interval_name(rows: Sequence[Row], spread) -> str:
    """What a throughput bar's whisker is: one run's windows, or the interval over the runs."""
    if len(rows) == 1:
        return "windows' interval, within-run only"
    return f"{100 * spread.coverage:.0f}% interval over {len(rows)} runs" if spread else "range"


def throughput_bars(c: Comparison) -> list[IntervalBar]:
    """Per mode and device count (the baseline's group too): the median throughput and its
    interval, each run's median as a dot."""
    out = []
    for (mode, devices), rows in _groups(c, c.rows).items():
        spread = pooled([r.figures.spread for r in rows if r.figures.spread is not None])
        values = [r.figures.throughput for r in rows if r.figures.throughput is not None]
        value = spread.median if spread else statistics.median(values) if values else None
        low, high = (spread.ci_low, spread.ci_high) if spread else (None, None)
        label = group_label(mode, devices)
        shown = "–" if value is None else f"{value:.0f} samples/s"
        if low is not None and high is not None:
            shown += f" ({_interval_name(rows, spread)} {low:.0f}–{high:.0f})"
        out.append(
            IntervalBar(
                label,
                value,
                low,
                high,
                modes.colour(mode),
                mode,
                tuple(values),
                _hover(label, rows, shown),
            )
        )
    return out


def speedup_bars(c: Comparison) -> list[IntervalBar]:
    """One bar per headline card: its speedup and interval, each repeat's speedup as a dot."""
    rows = [r for r in c.rows if not r.in_baseline]
    groups = _groups(c, rows)
    by_key = {(card.mode, card.devices): card for card in c.headline}
    out = []
    for key, members in groups.items():
        card: Card | None = by_key.get(key)
        if card is None:  # a group that ran as another mode: no card, no bar
            continue
        label = group_label(*key)
        dots = tuple(r.speed.speedup for r in members if r.speed.speedup is not None)
        out.append(
            IntervalBar(
                label,
                card.speedup,
                card.ci_low,
                card.ci_high,
                modes.colour(card.mode),
                card.mode,
                dots,
                _hover(label, members, f"{card.speedup_text()} {card.verdict}".strip()),
            )
        )
    return out


def throughput_figure(c: Comparison) -> go.Figure:
    """Throughput by mode: median bars, their intervals, repeats as dots."""
    return interval_bar_figure(throughput_bars(c), y_title=THROUGHPUT_TITLE)


def speedup_figure(c: Comparison) -> go.Figure:
    """Speedup by mode against the baseline (the cards as bars), a dotted line at 1."""
    return interval_bar_figure(
        speedup_bars(c), y_title=SPEEDUP_TITLE, reference=1.0, text_format=".2f"
    )
