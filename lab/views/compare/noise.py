"""Noise in a comparison: whether a speedup shows a difference ("within noise"), and what the
supervisor saw of other work on the machine ("busy machine").

A speedup is a ``spread.Ratio`` of two medians; its verdict is ``within noise`` when its interval
comes within 10% of 1.0, else ``faster`` or ``slower``. ``noise_notes`` explains it with the runs'
own numbers; ``busy_note`` turns the supervisor's ``interference`` record into a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.views.compare.fairness import FairnessWarning
from lab.views.compare.figures import run_spread
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.spread import Ratio, Spread, ratio

BASELINE, WITHIN, FASTER, SLOWER = "baseline", "within noise", "faster", "slower"

NOISE_TEXT = """\
**Noise.** Each run's throughput is the median of its logging windows (samples
per second, the first window left out as warm-up), with a 95% interval of that
median from order statistics. A speedup's interval divides the ends of the two
intervals; when it comes within 10% of 1.0 the row says *within noise*: these
runs do not show a difference, so it gets no green or red. The intervals
measure the noise *within* each run only; whole runs shift from one run to the
next (identical runs here differed by up to 5% on a quiet machine, hence the
10%), and a machine that was busier during one run than another shifts them
more, which is what the *busy machine* warning and the sweep's repeats
(Compare modes with repeats 3) are for."""


def verdict(r: Ratio | None, is_baseline: bool = False) -> str:
    """``baseline``, ``within noise``, ``faster`` or ``slower``; empty when there is no interval."""
    if is_baseline:
        return BASELINE
    if r is None:
        return ""
    if r.within_noise:
        return WITHIN
    return FASTER if r.value > 1 else SLOWER


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


def _fmt(s: Spread) -> str:
    interval = f"95% interval {s.ci_low:.0f}–{s.ci_high:.0f}, {s.windows} windows"
    return f"{s.median:.0f} samples/s ({interval})"


def noise_notes(
    runs: Sequence[CompareRun],
    baseline_key: str,
    scalars: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """The noise paragraph, then one sentence per run within noise, with its and the baseline's
    figures."""
    names = labels(runs)
    spreads = {r.key: run_spread(r, (scalars or {}).get(r.key)) for r in runs}
    base = spreads.get(baseline_key)
    out = [NOISE_TEXT]
    for r in runs:
        rat = ratio(spreads[r.key], base)
        if r.key == baseline_key or rat is None or not rat.within_noise:
            continue
        out.append(
            f"**{names[r.key]}** reads {rat.text()}: the interval comes within 10% of 1.0, so "
            "against "
            f"{names[baseline_key]} it is within noise. Its windows' median was "
            f"{_fmt(spreads[r.key])}, "
            f"the baseline's {_fmt(base)}."
        )
    return out
