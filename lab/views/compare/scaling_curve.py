"""The scaling curve of a device-count sweep: per mode and device count, the throughput over the
repeats with its 95% interval, the speedup against the single baseline and the efficiency
(speedup / devices). Empty unless some mode of the runs ran at several device counts. Read by
``Comparison.scaling_curve`` and rendered as ``compare --json``'s ``scaling_curve``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.views.compare.figures import RunFigures
from lab.views.compare.repeats import _mode, devices
from lab.views.compare.runs import CompareRun
from lab.views.compare.spread import Spread, median_spread, ratio


def pooled(spreads: list[Spread]) -> Spread | None:
    """One run: its own interval; several: the median of their medians and its interval."""
    if len(spreads) == 1:
        return spreads[0]
    return median_spread([s.median for s in spreads])


def _tp(s: Spread) -> dict[str, float]:
    return {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high}


def scaling_curve(
    runs: Sequence[CompareRun], figures: Mapping[str, RunFigures]
) -> list[dict[str, Any]]:
    """``[{"mode", "devices", "runs", "throughput", "rate", "speedup", "efficiency"}]`` sorted by
    mode and count; speedup against the (single, 1) group (None when there is none); ``rate`` is
    samples/s, or steps/s when some run has no samples/s (a script's)."""
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
    base = spreads.get(("single", 1))
    out = []
    for (mode, n), g in sorted(grouped.items()):
        s = spreads[(mode, n)]
        speed = ratio(s, base)
        out.append(
            {
                "mode": mode,
                "devices": n,
                "runs": [r.run_id for r in g],
                "throughput": _tp(s) if s else None,
                "rate": "samples/s" if samples else "steps/s",
                "speedup": speed.to_json() if speed else None,
                "efficiency": speed.scaled(1 / n).to_json() if speed else None,
            }
        )
    return out
