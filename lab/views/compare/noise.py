"""Noise in a comparison: whether a speedup shows a difference ("within noise"), and what the
supervisor saw of other work on the machine ("busy machine").

The verdict itself is ``lab.views.compare.verdict``'s one rule (``decide``): faster or slower only
when the whole interval lies beyond the noise margin around 1.0. ``noise_notes`` explains it with
the groups' own numbers; ``busy_note`` turns the supervisor's ``interference`` record into a
warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.verdict import (
    BASELINE,
    FASTER,
    SLOWER,
    SUSPECT,
    TOO_FEW_RUNS,
    WITHIN,
)

__all__ = ["BASELINE", "FASTER", "SLOWER", "SUSPECT", "WITHIN"]

NOISE_TEXT = """\
**Noise.** A run's throughput is the median of its logging windows (samples per
second, the first window left out as warm-up). With repeats, a comparison is
between groups of runs (a mode, a knob's value, a device count): the speedup is
the ratio of the groups' medians, and its interval is read off the ratios of
every pair of runs (one of each group), cut where the exact Mann–Whitney
distribution says; its real coverage is written beside it ("range of 3×3 pairs,
90%": 3 runs against 3 cover the true ratio 9 times in 10). One run against one
run has only its logging windows, which follow each other and so look surer
than they are: such an interval says *within-run windows only, no run-to-run
evidence*, and makes no claim: whole runs shift (identical pairs here measured
1.33× and 0.71×), so one run each reads *within noise* until each side is
repeated 3 times, as 2 runs against 2 (67%) does. A speedup is *faster* or
*slower* only when its whole interval lies beyond the noise margin around 1.0
(above 1 + m, or below 1 / (1 + m)); else
*within noise*, with no green or red. The margin is this machine's measured
run-to-run noise where the lab has measured it, else the documented 10%. An
efficiency above 1.1 under strong scaling is flagged instead of shown green: the
runs did different work."""


def busy_note(interference: dict | None) -> str | None:
    """The "busy machine" warning of one run, naming what else ran; None when it had the machine to
    itself."""
    if not interference or not interference.get("busy"):
        return None
    why = "; ".join(interference.get("reasons") or []) or "other processes used the machine"
    return (
        f"Busy machine: {why}. Its throughput (and any speedup against it) measures that other "
        "work "
        "too: run it again on a quiet machine, or sweep with repeats."
    )


def busy_warnings(runs: Sequence[CompareRun]) -> list[FairnessWarning]:
    """One warning per chosen run that shared the machine."""
    names = labels(runs)
    out = []
    for r in runs:
        note = busy_note(r.interference)
        if note:
            out.append(FairnessWarning("busy_machine", f"{names[r.key]}: {note}"))
    return out


def noise_notes(groups: Sequence[Any]) -> list[str]:
    """The noise paragraph, the baseline group's own spread, then one sentence per group within
    noise with its and the baseline's figures and the margin its verdict used."""
    base = next((g for g in groups if g.is_baseline), None)
    out = [NOISE_TEXT]
    if base is None:
        return out
    out.append(
        f"**Baseline**: {base.mode} on {base.devices} device{'s' * (base.devices != 1)}, "
        f"{base.spread_text()}. Noise margin {base.margin_pct:g}% ({base.margin_source})."
    )
    for g in groups:
        if g.is_baseline or g.verdict != WITHIN:
            continue
        why = (
            "too few runs for any verdict, however far from 1.0 it lies (identical runs differ "
            "from run to run), so against the baseline it is within noise until each side is "
            "repeated 3 times. "
            if TOO_FEW_RUNS in (g.coverage_text or "")
            else f"the interval reaches into the {g.margin_pct:g}% margin around 1.0 "
            f"({g.margin_source}), so against the baseline it is within noise. "
        )
        out.append(
            f"**{g.mode} on {g.devices}** reads {g.speedup_text()}: {why}"
            f"Its runs: {g.spread_text()}; the baseline's: {base.spread_text()}."
        )
    return out
