"""The scaling curve of a device-count sweep: per mode and device count, the throughput over the
repeats with its interval (one run: its windows'; several: order statistics of their medians), the
speedup against the single baseline group and the efficiency (speedup / devices). With repeats on
either side the speedup is the cards' (``verdict.compare_groups``: the ratio of the groups'
medians, the interval over the pairs of runs, its ``coverage_text`` and ``verdict``); one run
against one run, the ratio of their windows' intervals (no run-to-run evidence).
Empty unless some mode of the runs ran at several device counts. Read by
``Comparison.scaling_curve`` and rendered as ``compare --json``'s ``scaling_curve``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.engine.spec.sweep import WEAK
from lab.views.compare.figures import RunFigures
from lab.views.compare.repeats import _mode, devices, on_gpus
from lab.views.compare.runs import CompareRun
from lab.views.compare.spread import Spread, median_spread, ratio
from lab.views.compare.verdict import (
    BASELINE,
    NO_RUN_TO_RUN,
    ONE_EACH,
    compare_groups,
    margins_of,
    one_run_each,
    own_range,
)


def pooled(spreads: list[Spread]) -> Spread | None:
    """One run: its own interval; several: the median of their medians and its interval."""
    if len(spreads) == 1:
        return spreads[0]
    return median_spread([s.median for s in spreads])


def baseline_key(groups: Mapping[tuple[str, int], Any]) -> tuple[str, int]:
    """The (mode, count) group speedups are against: single on 1 device, or a weak sweep's
    ``single (weak)`` (``repeats.asked_mode`` names weak runs so; their 1-device run is the same
    baseline, per-device batch = global batch)."""
    for key in (("single", 1), (f"single ({WEAK})", 1)):
        if key in groups:
            return key
    return ("single", 1)


def _tp(s: Spread) -> dict[str, float]:
    return {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high}


def scaling_curve(
    runs: Sequence[CompareRun],
    figures: Mapping[str, RunFigures],
    margin: Any = None,
) -> list[dict[str, Any]]:
    """``[{"mode", "devices", "runs", "throughput", "rate", "speedup", "efficiency", "on_gpus"}]``
    sorted by mode and count; speedup against the (single, 1) group, a weak sweep's (single
    (weak), 1) (None when there is none); ``rate`` is samples/s, or steps/s when some run has no
    samples/s (a script's); ``on_gpus``: every run of the point trained on GPUs."""
    margins = margins_of(margin)
    grouped: dict[tuple[str, int], list[CompareRun]] = {}
    for r in runs:
        grouped.setdefault((_mode(r), devices(r)), []).append(r)
    counts: dict[str, set[int]] = {}
    for mode, n in grouped:
        counts.setdefault(mode, set()).add(n)
    if not any(len(c) > 1 for c in counts.values()):
        return []
    # samples/s where every run measured it; else every run's step rate (a script's own runs), as
    # Compare's speedups do: one unit for the whole curve
    samples = all(figures[r.key].spread is not None for r in runs)

    def rate(r: CompareRun) -> Spread | None:
        return figures[r.key].spread if samples else figures[r.key].steps_spread

    spreads = {k: pooled([s for s in map(rate, g) if s is not None]) for k, g in grouped.items()}
    key = baseline_key(grouped)
    base = spreads.get(key)
    values = {k: [s.median for s in map(rate, g) if s is not None] for k, g in grouped.items()}
    out = []
    for (mode, n), g in sorted(grouped.items()):
        s = spreads[(mode, n)]
        pct = margins.at(n).pct
        if (mode, n) == key:
            speed = _itself(s, values[(mode, n)])
        else:
            speed = _speedup(s, base, values[(mode, n)], values.get(key) or [], pct)
        out.append(
            {
                "mode": mode,
                "devices": n,
                "runs": [r.run_id for r in g],
                "throughput": _tp(s) if s else None,
                "rate": "samples/s" if samples else "steps/s",
                "speedup": speed,
                "efficiency": None if speed is None else _scaled(speed, 1 / n),
                "on_gpus": all(on_gpus(r) for r in g),
            }
        )
    return out


def _itself(s: Spread | None, mine: list[float]) -> dict[str, Any] | None:
    """The baseline against itself: 1, with its own spread around its median."""
    if len(mine) > 1:
        return {**own_range(mine), "verdict": BASELINE}
    own = ratio(s, s)
    if own is None:
        return None
    return {**own.to_json(), "coverage_text": NO_RUN_TO_RUN, "verdict": BASELINE}


def _speedup(
    s: Spread | None,
    base: Spread | None,
    mine: list[float],
    theirs: list[float],
    margin_pct: float,
) -> dict[str, Any] | None:
    """``{"value", "ci_low", "ci_high", "within_noise", "coverage_text", "verdict"}`` against the
    single baseline group."""
    if len(mine) > 1 or len(theirs) > 1:
        if not mine or not theirs:
            return None
        c = compare_groups(theirs, mine, margin_pct)
        return {
            "value": c.speedup,
            "ci_low": c.low,
            "ci_high": c.high,
            "within_noise": c.verdict == "within noise",
            "coverage_text": c.coverage_text,
            "verdict": c.verdict,
        }
    speed = ratio(s, base)
    if speed is None:
        return None
    return {
        **speed.to_json(),
        "coverage_text": ONE_EACH,
        "verdict": one_run_each(speed.ci_low, speed.ci_high),
    }


def _scaled(speed: dict[str, Any], factor: float) -> dict[str, Any]:
    return {
        **speed,
        **{k: speed[k] * factor for k in ("value", "ci_low", "ci_high")},
    }
