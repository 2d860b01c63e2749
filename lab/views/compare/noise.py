"""Noise in a comparison: each run's throughput spread, speedups with intervals, "within noise",
busy machines.

Owns what the Compare table, the HTML export, the ``compare`` command and
the Live page say about how sure a figure is. A run's steady throughput is
the median of its logging windows with a 95% interval (summary.json's
``throughput``, or derived from its ``perf/samples_per_sec`` events with
``lab.views.compare.spread`` for runs without it). A speedup is a ``spread.Ratio``
of two such medians; a row whose interval comes within 10% of 1.0 is "within noise" and is
never emphasised green or red (``emphasis``), and ``noise_notes`` says why
with the run's own numbers. The supervisor's ``interference`` record
(status.json, ``lab.engine.supervise.interference``) becomes the "busy machine"
warning (``busy_note``, ``busy_warnings``). Tested by tests/test_noise.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from lab.engine.registry import status
from lab.views.compare.runs import CompareRun, labels
from lab.views.compare.spread import (
    Ratio,
    Spread,
    median_spread,
    order_ranks,
    ratio,
    steady_windows,
)

if TYPE_CHECKING:
    from lab.views.compare.fairness import FairnessWarning

RATE_TAG = "perf/samples_per_sec"
SPEEDUP_CI, EFFICIENCY_CI, VERDICT, MACHINE = (
    "speedup (95% interval)",
    "efficiency (95% interval)",
    "noise",
    "machine",
)
NOISE_COLUMNS = (SPEEDUP_CI, EFFICIENCY_CI, VERDICT, MACHINE)  # text columns of the Compare table
HELP = {
    SPEEDUP_CI: "Median throughput / the baseline's, with the 95% interval (ratio of the "
    "intervals' ends).",
    EFFICIENCY_CI: "Speedup / (devices / baseline devices), with the same interval scaled.",
    VERDICT: "'within noise' when the speedup's interval comes within 10% of 1.0 (how much "
    "identical runs "
    "differ): no difference shown by these runs.",
    MACHINE: "'busy' when other processes used the machine during the run (see the warning).",
}
BASELINE, WITHIN, FASTER, SLOWER = "baseline", "within noise", "faster", "slower"
GREEN, RED = "background-color: #d8f0dc", "background-color: #f8dada"

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


def run_spread(run: CompareRun, scalars: Mapping[str, Any] | None = None) -> Spread | None:
    """The run's steady throughput spread: summary.json's ``throughput``, else from its events; None
    if unknown."""
    tp = (run.summary or {}).get("throughput")
    if isinstance(tp, dict) and tp.get("median") and tp.get("windows"):
        n = int(tp["windows"])
        return Spread(
            float(tp["median"]),
            float(tp["ci_low"]),
            float(tp["ci_high"]),
            n,
            round(order_ranks(n)[1], 4),
        )
    series = (scalars or {}).get(RATE_TAG)
    if series is not None and len(series.value):
        return median_spread(steady_windows(series.step, series.value))
    return None


def run_interference(run: CompareRun) -> dict | None:
    """The supervisor's interference record of the run (status.json); None for runs without one."""
    rec = status(Path(run.run_dir)).get("interference")
    return rec if isinstance(rec, dict) else None


def verdict(r: Ratio | None, is_baseline: bool = False) -> str:
    """``baseline``, ``within noise``, ``faster`` or ``slower``; empty when there is no interval."""
    if is_baseline:
        return BASELINE
    if r is None:
        return ""
    if r.within_noise:
        return WITHIN
    return FASTER if r.value > 1 else SLOWER


def _eff_text(value: float, r: Ratio | None, factor: float) -> str:
    if r is None:
        return f"{value:.2f}"
    e = r.scaled(factor)
    return f"{e.value:.2f} ({e.ci_low:.2f}–{e.ci_high:.2f})"


def cells(
    r: Ratio | None,
    speedup: float | None,
    factor: float,
    is_baseline: bool,
    interference: dict | None,
) -> dict[str, str]:
    """The noise columns of one row: speedup and efficiency with intervals, the verdict, the
    machine."""
    machine = "" if interference is None else ("busy" if interference.get("busy") else "quiet")
    if speedup is None:
        return {SPEEDUP_CI: "", EFFICIENCY_CI: "", VERDICT: "", MACHINE: machine}
    return {
        SPEEDUP_CI: r.text() if r else f"{speedup:.2f}×",
        EFFICIENCY_CI: _eff_text(speedup * factor, r, factor),
        VERDICT: verdict(r, is_baseline),
        MACHINE: machine,
    }


def emphasis(table: pd.DataFrame) -> list[str]:
    """Per row, the CSS of its speedup cells: green faster, red slower, none within noise or
    unknown."""
    if VERDICT not in table.columns:
        return [""] * len(table)
    return [GREEN if v == FASTER else RED if v == SLOWER else "" for v in table[VERDICT]]


def styled(table: pd.DataFrame, formats: Mapping[str, str], escape: bool = False) -> Any:
    """The table as a pandas Styler: printf ``formats`` per column, speedup cells coloured by
    ``emphasis``.

    ``escape``: HTML-escape the text cells (for an HTML page; Streamlit shows text as is).
    """
    css = emphasis(table)
    cols = [c for c in (SPEEDUP_CI, EFFICIENCY_CI, VERDICT) if c in table.columns]
    sty = table.style.format(
        {c: (lambda f: lambda v: f % v)(f) for c, f in formats.items() if c in table.columns},  # noqa: B023
        na_rep="–",
        escape="html" if escape else None,
    )
    if cols:
        sty = sty.apply(lambda col: css, subset=cols, axis=0)
    return sty


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
    # fairness imports compare, which imports this module
    from lab.views.compare.fairness import FairnessWarning

    names = labels(runs)
    out = []
    for r in runs:
        note = busy_note(run_interference(r))
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
